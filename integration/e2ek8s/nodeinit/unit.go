package main

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"time"
)

// unit is the subset of a systemd service unit nodeinit understands.
type unit struct {
	name string // containerd.service

	wants, requires, before, after []string
	wantedBy, requiredBy           []string

	typ            string     // simple, exec, notify, oneshot
	execStartPre   [][]string // each: argv, first element may start with '-'
	execStart      []string
	environment    []string // KEY=VALUE
	envFiles       []string // may start with '-': optional
	restart        string   // no, always, on-failure
	restartSec     time.Duration
	killMode       string // control-group, process, mixed
	killSignal     syscall.Signal
	timeoutStopSec time.Duration
	// timeoutStartSec bounds the wait for READY=1 (default 90 s, as systemd's).
	timeoutStartSec time.Duration
	ignored         []string // directives nodeinit does not implement
}

// loadUnit parses dir/name.
func loadUnit(dir, name string) (*unit, error) {
	f, err := os.Open(filepath.Join(dir, name))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	u := &unit{name: name, typ: "simple", restart: "no", restartSec: 100 * time.Millisecond,
		killMode: "control-group", killSignal: syscall.SIGTERM, timeoutStopSec: 15 * time.Second,
		timeoutStartSec: 90 * time.Second}
	section := ""
	sc := bufio.NewScanner(f)
	var cont string
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if strings.HasSuffix(line, "\\") {
			cont += strings.TrimSuffix(line, "\\") + " "
			continue
		}
		line, cont = cont+line, ""
		if line == "" || line[0] == '#' || line[0] == ';' {
			continue
		}
		if line[0] == '[' {
			section = strings.Trim(line, "[]")
			continue
		}
		key, val, ok := strings.Cut(line, "=")
		if !ok {
			return nil, fmt.Errorf("%s: bad line %q", name, line)
		}
		key, val = strings.TrimSpace(key), strings.TrimSpace(val)
		if err := u.set(section, key, val); err != nil {
			return nil, fmt.Errorf("%s: %s=%s: %w", name, key, val, err)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(u.execStart) == 0 {
		return nil, fmt.Errorf("%s: no ExecStart", name)
	}
	return u, nil
}

func (u *unit) set(section, key, val string) error {
	var err error
	switch section + "." + key {
	case "Unit.Description", "Unit.Documentation":
		// for people
	case "Unit.Wants":
		u.wants = append(u.wants, strings.Fields(val)...)
	case "Unit.Requires":
		u.requires = append(u.requires, strings.Fields(val)...)
	case "Unit.Before":
		u.before = append(u.before, strings.Fields(val)...)
	case "Unit.After":
		u.after = append(u.after, strings.Fields(val)...)
	case "Install.WantedBy":
		u.wantedBy = append(u.wantedBy, strings.Fields(val)...)
	case "Install.RequiredBy":
		u.requiredBy = append(u.requiredBy, strings.Fields(val)...)
	case "Service.Type":
		switch val {
		case "simple", "exec", "notify", "oneshot":
			u.typ = val
		default:
			return fmt.Errorf("type not supported")
		}
	case "Service.ExecStart":
		u.execStart, err = splitCommand(val)
	case "Service.ExecStartPre":
		var argv []string
		argv, err = splitCommand(val)
		u.execStartPre = append(u.execStartPre, argv)
	case "Service.Environment":
		var kvs []string
		kvs, err = splitCommand(val)
		u.environment = append(u.environment, kvs...)
	case "Service.EnvironmentFile":
		u.envFiles = append(u.envFiles, val)
	case "Service.Restart":
		u.restart = val
	case "Service.RestartSec":
		u.restartSec, err = parseSec(val)
	case "Service.KillMode":
		u.killMode = val
	case "Service.KillSignal":
		switch strings.TrimPrefix(val, "SIG") {
		case "TERM":
			u.killSignal = syscall.SIGTERM
		case "INT":
			u.killSignal = syscall.SIGINT
		case "KILL":
			u.killSignal = syscall.SIGKILL
		default:
			return fmt.Errorf("signal not supported")
		}
	case "Service.TimeoutStartSec":
		u.timeoutStartSec, err = parseSec(val)
	case "Service.TimeoutStopSec":
		u.timeoutStopSec, err = parseSec(val)
	default:
		u.ignored = append(u.ignored, section+"."+key)
	}
	return err
}

// parseSec parses a systemd time span: "2", "2s", "500ms", "1min".
func parseSec(v string) (time.Duration, error) {
	v = strings.ReplaceAll(v, "min", "m")
	if d, err := time.ParseDuration(v); err == nil {
		return d, nil
	}
	return time.ParseDuration(v + "s")
}

// splitCommand splits a command line as systemd does for the simple
// cases: whitespace separates words, double or single quotes group.
func splitCommand(s string) ([]string, error) {
	var out []string
	var cur strings.Builder
	inWord := false
	var quote byte
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case quote != 0 && c == quote:
			quote = 0
		case quote != 0:
			if c == '\\' && i+1 < len(s) {
				i++
				c = s[i]
			}
			cur.WriteByte(c)
		case c == '"' || c == '\'':
			quote, inWord = c, true
		case c == ' ' || c == '\t':
			if inWord {
				out = append(out, cur.String())
				cur.Reset()
				inWord = false
			}
		default:
			cur.WriteByte(c)
			inWord = true
		}
	}
	if quote != 0 {
		return nil, fmt.Errorf("unterminated quote")
	}
	if inWord {
		out = append(out, cur.String())
	}
	return out, nil
}

// env returns the unit's environment: base, then EnvironmentFile=, then
// Environment= (systemd's order: later assignments win).
func (u *unit) env(base []string) ([]string, error) {
	env := append([]string(nil), base...)
	for _, f := range u.envFiles {
		optional := strings.HasPrefix(f, "-")
		f = strings.TrimPrefix(f, "-")
		b, err := os.ReadFile(f)
		if err != nil {
			if optional && os.IsNotExist(err) {
				continue
			}
			return nil, fmt.Errorf("EnvironmentFile %s: %w", f, err)
		}
		for _, l := range strings.Split(string(b), "\n") {
			l = strings.TrimSpace(l)
			if l == "" || l[0] == '#' || l[0] == ';' {
				continue
			}
			k, v, ok := strings.Cut(l, "=")
			if !ok {
				return nil, fmt.Errorf("EnvironmentFile %s: bad line %q", f, l)
			}
			v = strings.TrimSpace(v)
			if len(v) >= 2 && (v[0] == '"' || v[0] == '\'') && v[len(v)-1] == v[0] {
				v = v[1 : len(v)-1]
			}
			env = append(env, strings.TrimSpace(k)+"="+v)
		}
	}
	return append(env, u.environment...), nil
}

// braced is ${NAME} in a command line.
var braced = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)\}`)

// expand substitutes variables in argv as systemd does in ExecStart=:
// ${VAR} anywhere in a word, $VAR as a word of its own (split at
// whitespace into words), and $$ is a literal $.
func expand(argv []string, env []string) []string {
	m := map[string]string{}
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		m[k] = v
	}
	var out []string
	for _, a := range argv {
		if len(a) > 1 && a[0] == '$' && a[1] != '{' && a[1] != '$' {
			out = append(out, strings.Fields(m[a[1:]])...)
			continue
		}
		parts := strings.Split(a, "$$")
		for i, p := range parts {
			parts[i] = braced.ReplaceAllStringFunc(p, func(v string) string { return m[v[2:len(v)-1]] })
		}
		out = append(out, strings.Join(parts, "$"))
	}
	return out
}
