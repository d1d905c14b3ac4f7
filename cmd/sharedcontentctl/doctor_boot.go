package main

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

const (
	pluginBinary      = "containerd-sharedcontent"
	containerdUnit    = "containerd.service"
	announceFlag      = "--containerd-address"
	bootOrderCheck    = "boot order"
	deployPluginUnit  = "deploy/systemd/containerd-sharedcontent.service"
	defaultContainerd = "/run/containerd/containerd.sock"
)

// Where the boot order is read from: systemd's unit directories, highest
// precedence first, and /proc for the daemons running now. Tests point
// them at their own trees.
var (
	systemdUnitDirs = []string{"/etc/systemd/system", "/run/systemd/system", "/usr/local/lib/systemd/system", "/usr/lib/systemd/system", "/lib/systemd/system"}
	procDir         = "/proc"
)

// unit is a systemd unit file merged with its drop-ins: the keys doctor
// reads, each a list of the words of every assignment.
type unit struct {
	name string
	keys map[string][]string
}

// readUnit reads name from the first unit directory holding it, and the
// drop-ins of name.d/ in every directory; nil if no directory holds it.
func readUnit(name string) *unit {
	u := &unit{name: name, keys: map[string][]string{}}
	found := false
	for _, dir := range systemdUnitDirs {
		if !found {
			if b, err := os.ReadFile(filepath.Join(dir, name)); err == nil {
				u.parse(b)
				found = true
			}
		}
		dropins, _ := filepath.Glob(filepath.Join(dir, name+".d", "*.conf"))
		for _, f := range dropins {
			if b, err := os.ReadFile(f); err == nil {
				u.parse(b)
			}
		}
	}
	if !found {
		return nil
	}
	return u
}

// parse adds a unit file's assignments, joining continued lines.
func (u *unit) parse(b []byte) {
	sc := bufio.NewScanner(bytes.NewReader(b))
	line := ""
	for sc.Scan() {
		l := strings.TrimSpace(sc.Text())
		if strings.HasSuffix(l, `\`) {
			line += strings.TrimSuffix(l, `\`) + " "
			continue
		}
		line += l
		if k, v, ok := strings.Cut(line, "="); ok && !strings.HasPrefix(line, "#") && !strings.HasPrefix(line, ";") {
			u.keys[strings.TrimSpace(k)] = append(u.keys[strings.TrimSpace(k)], strings.Fields(v)...)
		}
		line = ""
	}
}

// pluginUnits are the service units whose ExecStart runs the daemon.
func pluginUnits() []*unit {
	seen := map[string]bool{}
	var units []*unit
	for _, dir := range systemdUnitDirs {
		files, _ := filepath.Glob(filepath.Join(dir, "*.service"))
		for _, f := range files {
			name := filepath.Base(f)
			if seen[name] {
				continue
			}
			seen[name] = true
			if u := readUnit(name); u != nil && slices.ContainsFunc(u.keys["ExecStart"], isPluginBinary) {
				units = append(units, u)
			}
		}
	}
	return units
}

func isPluginBinary(word string) bool {
	return filepath.Base(strings.TrimLeft(word, "-@:+!")) == pluginBinary
}

// announces reports whether the daemon's arguments leave --containerd-address
// naming a socket (its default does): it then announces every image to
// containerd once serving, so CRI sees again the images it dropped while
// the daemon was down. Only an empty value turns that off. (An empty
// SHAREDCONTENT_CONTAINERD_ADDRESS in the unit's environment does too; the
// arguments do not show it.)
func announces(args []string) bool {
	for i, a := range args {
		if v, ok := strings.CutPrefix(a, announceFlag+"="); ok {
			return v != "" && v != `""`
		}
		if a == announceFlag && i+1 < len(args) {
			return !strings.HasPrefix(args[i+1], "-") && args[i+1] != `""`
		}
	}
	return true
}

// runningDaemons are the argument lists of the daemons running now.
func runningDaemons() [][]string {
	entries, _ := os.ReadDir(procDir)
	var daemons [][]string
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(procDir, e.Name(), "cmdline"))
		if err != nil || len(b) == 0 {
			continue
		}
		args := strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
		if isPluginBinary(args[0]) {
			daemons = append(daemons, args[1:])
		}
	}
	return daemons
}

// bootOrder checks that containerd never runs long without the daemon:
// a systemd unit starts the daemon before containerd.service (as
// deploy/systemd's does), or the daemon announces every image to
// containerd once serving (--containerd-address), so that CRI, which drops
// every image it cannot read when containerd starts while the daemon is
// down, lists them again without a pull. Neither is a warning, not a
// problem: containerd works, but a node's reboot or the daemon's crash
// hides every image from kubelet.
func (d *doctorRun) bootOrder() {
	units := pluginUnits()
	containerd := readUnit(containerdUnit)
	for _, u := range units {
		if slices.Contains(u.keys["Before"], containerdUnit) {
			d.ok(bootOrderCheck, "%s starts %s before %s", u.name, pluginBinary, containerdUnit)
			return
		}
		if containerd != nil && slices.Contains(containerd.keys["After"], u.name) {
			d.ok(bootOrderCheck, "%s starts after %s", containerdUnit, u.name)
			return
		}
	}
	for _, u := range units {
		if announces(u.keys["ExecStart"]) {
			d.ok(bootOrderCheck, "%s runs %s with %s set (its default): once serving it announces every image to containerd, so CRI lists them again", u.name, pluginBinary, announceFlag)
			return
		}
	}
	for _, args := range runningDaemons() {
		if announces(args) {
			d.ok(bootOrderCheck, "the running %s has %s set (its default): once serving it announces every image to containerd, so CRI lists them again", pluginBinary, announceFlag)
			return
		}
	}
	msg := fmt.Sprintf("no systemd unit starts %s before %s, and no daemon runs with %s set (it is turned off): when containerd starts while the daemon is down (a reboot of a node whose daemon is a pod, a crash of that pod) CRI drops every image and does not list them again once the daemon is back, so kubelet cannot start pods, the daemon's own included",
		pluginBinary, containerdUnit, announceFlag)
	if len(units) > 0 {
		msg = fmt.Sprintf("%s runs %s but is not ordered before %s, and turns %s off: when containerd starts first CRI drops every image and does not list them again once the daemon is back",
			units[0].name, pluginBinary, containerdUnit, announceFlag)
	}
	d.warning(bootOrderCheck, msg,
		fmt.Sprintf("run the daemon as a host service ordered before containerd: install %s (Before=%s) into /etc/systemd/system and systemctl enable --now it; or run %s with %s=%s, so that CRI lists the images again once it serves (docs/kubernetes.md)",
			deployPluginUnit, containerdUnit, pluginBinary, announceFlag, defaultContainerd))
}
