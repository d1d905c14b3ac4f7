package e2ek8s

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestNodeInit checks the stand-in for systemd the nodes run
// (./nodeinit) on its own: enabled units start at boot in After= order, a
// Type=notify unit counts as started at READY=1, Restart=always restarts
// a killed unit, systemctl's verbs work from inside the node, and killing
// the init kills every process of the node.
func TestNodeInit(t *testing.T) {
	needInit(t)
	dir, err := os.MkdirTemp("/tmp", "init")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	units, sbin, logs := filepath.Join(dir, "units"), filepath.Join(dir, "sbin"), filepath.Join(dir, "logs")
	for _, d := range []string{units, sbin, logs, "/usr/local/sbin"} {
		require.NoError(t, os.MkdirAll(d, 0o755))
	}
	b, err := os.ReadFile(bins.nodeinit)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(sbin, "systemctl"), b, 0o755))
	// first: records the time, then sends READY=1; second, ordered
	// after it, records when it started and its PID.
	notify := `import os, socket; s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM); s.sendto(b"READY=1", os.environ["NOTIFY_SOCKET"])`
	writeUnit := func(name, body string) {
		require.NoError(t, os.WriteFile(filepath.Join(units, name), []byte(body), 0o644))
	}
	writeUnit("first.service", fmt.Sprintf(`[Unit]
Before=second.service
[Service]
Type=notify
Environment="OUT=%[1]s/first"
ExecStart=/bin/sh -c 'sleep 0.3; date +%%s.%%N >>$OUT; python3 -c '"'"'%[2]s'"'"'; exec sleep 1000'
[Install]
WantedBy=multi-user.target
`, dir, notify))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "second.env"), fmt.Appendf(nil, "OUT=\"%s/second\"\n", dir), 0o644))
	writeUnit("second.service", `[Unit]
After=first.service
[Service]
EnvironmentFile=`+filepath.Join(dir, "second.env")+`
ExecStart=/bin/sh -c 'echo $(date +%s.%N) $$$$ >>$OUT; exec sleep 1000'
Restart=always
RestartSec=100ms
[Install]
WantedBy=multi-user.target
`)
	wants := filepath.Join(units, "multi-user.target.wants")
	require.NoError(t, os.MkdirAll(wants, 0o755))
	for _, u := range []string{"second.service", "first.service"} {
		require.NoError(t, os.Symlink("/etc/systemd/system/"+u, filepath.Join(wants, u)))
	}
	cfg, err := json.Marshal(initConfig{Hostname: "init-test", LogDir: logs,
		Binds: []struct{ Source, Target string }{{units, "/etc/systemd/system"}, {sbin, "/usr/local/sbin"}}})
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "init.json"), cfg, 0o644))

	boot := func() (*daemon, io.WriteCloser) {
		pr, pw, err := os.Pipe()
		require.NoError(t, err)
		d, err := startDaemon("init", filepath.Join(logs, "nodeinit.log"), pr, &syscall.SysProcAttr{
			Cloneflags: syscall.CLONE_NEWPID | syscall.CLONE_NEWNS | syscall.CLONE_NEWUTS | syscall.CLONE_NEWNET,
		}, nil, bins.nodeinit, "-config", filepath.Join(dir, "init.json"))
		pr.Close()
		require.NoError(t, err)
		_, err = io.WriteString(pw, "go\n")
		require.NoError(t, err)
		return d, pw
	}
	systemctl := func(d *daemon, args ...string) (string, int) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "nsenter", append([]string{"--target", strconv.Itoa(d.cmd.Process.Pid),
			"--mount", "--uts", "--pid", "--", "systemctl"}, args...)...)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else {
			require.NoError(t, err)
		}
		return out.String(), code
	}
	lines := func(name string) [][]string {
		b, _ := os.ReadFile(filepath.Join(dir, name))
		var out [][]string
		for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			if l != "" {
				out = append(out, strings.Fields(l))
			}
		}
		return out
	}
	stamp := func(s string) float64 {
		f, err := strconv.ParseFloat(s, 64)
		require.NoError(t, err)
		return f
	}

	d, stdin := boot()
	t.Cleanup(func() { d.kill(); stdin.Close() })
	waitFor(t, "both units started", time.Minute, func() (bool, error) {
		return len(lines("second")) == 1, nil
	})
	require.Len(t, lines("first"), 1)
	require.Greater(t, stamp(lines("second")[0][0]), stamp(lines("first")[0][0]), "second started before first was ready (READY=1)")
	out, code := systemctl(d, "is-active", "first", "second.service")
	require.Equal(t, 0, code, out)
	require.Equal(t, "active\nactive\n", out)

	// Restart=always: the unit's process killed, it runs again.
	pid, err := strconv.Atoi(lines("second")[0][1])
	require.NoError(t, err)
	ns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", d.cmd.Process.Pid))
	require.NoError(t, err)
	var hostPID string
	for _, p := range processesIn(ns) {
		if st, err := os.ReadFile("/proc/" + p + "/status"); err == nil && strings.Contains(string(st), fmt.Sprintf("\nNSpid:\t%s\t%d\n", p, pid)) {
			hostPID = p
		}
	}
	require.NotEmpty(t, hostPID, "second's process (PID %d in the node) not found", pid)
	hp, _ := strconv.Atoi(hostPID)
	require.NoError(t, syscall.Kill(hp, syscall.SIGKILL))
	waitFor(t, "second restarted", time.Minute, func() (bool, error) { return len(lines("second")) == 2, nil })
	require.NotEqual(t, lines("second")[0][1], lines("second")[1][1])

	// The verbs.
	out, code = systemctl(d, "stop", "second")
	require.Equal(t, 0, code, out)
	out, code = systemctl(d, "is-active", "second")
	require.Equal(t, 3, code, out)
	require.Equal(t, "inactive\n", out)
	out, code = systemctl(d, "restart", "second")
	require.Equal(t, 0, code, out)
	waitFor(t, "second started again", time.Minute, func() (bool, error) { return len(lines("second")) == 3, nil })
	out, code = systemctl(d, "disable", "first")
	require.Equal(t, 0, code, out)
	require.NoFileExists(t, filepath.Join(wants, "first.service"))
	out, code = systemctl(d, "enable", "first")
	require.Equal(t, 0, code, out)
	require.FileExists(t, filepath.Join(wants, "first.service"))
	out, code = systemctl(d, "daemon-reload")
	require.Equal(t, 0, code, out)
	out, code = systemctl(d, "mask", "first")
	require.Equal(t, 1, code, out)
	require.Contains(t, out, `verb "mask" not supported`)

	// Power off: every process of the node dies with its init.
	require.NotEmpty(t, processesIn(ns))
	d.kill()
	waitFor(t, "the node's processes gone", time.Minute, func() (bool, error) {
		left := processesIn(ns)
		return len(left) == 0, fmt.Errorf("left: %v", left)
	})
	// Boot again: the enabled units start again.
	d, stdin = boot()
	waitFor(t, "both units started again", time.Minute, func() (bool, error) {
		return len(lines("second")) == 4 && len(lines("first")) == 2, nil
	})
}
