package main

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// bootTree points doctor's systemd unit directories and /proc at empty
// trees of the test's own (the host's would decide the result), and
// returns the unit directory and the proc directory.
func bootTree(t *testing.T) (units, proc string) {
	t.Helper()
	dir := t.TempDir()
	units, proc = filepath.Join(dir, "etc", "systemd", "system"), filepath.Join(dir, "proc")
	require.NoError(t, os.MkdirAll(units, 0o755))
	require.NoError(t, os.MkdirAll(proc, 0o755))
	oldDirs, oldProc := systemdUnitDirs, procDir
	systemdUnitDirs, procDir = []string{units, filepath.Join(dir, "lib", "systemd", "system")}, proc
	t.Cleanup(func() { systemdUnitDirs, procDir = oldDirs, oldProc })
	return units, proc
}

// deployUnit is deploy/systemd/containerd-sharedcontent.service.
func deployUnit(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("../../" + deployPluginUnit)
	require.NoError(t, err)
	return string(b)
}

func installUnit(t *testing.T, units, name, body string) {
	t.Helper()
	writeFile(t, filepath.Join(units, name), body)
}

// runningDaemon makes pid in proc a process running args.
func runningDaemon(t *testing.T, proc, pid string, args ...string) {
	t.Helper()
	writeFile(t, filepath.Join(proc, pid, "cmdline"), strings.Join(args, "\x00")+"\x00")
}

// TestDoctorBootOrder: a node where containerd may start before the daemon
// with nothing to bring CRI's images back gets a warning with its fix
// (and doctor still passes: containerd works until the next reboot); a
// unit ordered before containerd, either way round, or a daemon that
// announces the images to containerd, is ok.
func TestDoctorBootOrder(t *testing.T) {
	n := newNode(t)
	config := writeFile(t, filepath.Join(t.TempDir(), "config.toml"), deployConfig(t, n.socket))
	unordered := strings.Replace(deployUnit(t), "Before=containerd.service\n", "", 1)
	require.NotEqual(t, deployUnit(t), unordered, "the deploy unit is ordered before containerd")
	for _, tc := range []struct {
		name   string
		setup  func(t *testing.T, units, proc string)
		result string
		in     string
	}{{
		name:   "no unit, no daemon",
		setup:  func(t *testing.T, units, proc string) {},
		result: checkWarning,
		in:     "no systemd unit starts containerd-sharedcontent before containerd.service",
	}, {
		name: "daemon without the unit, announcing nothing",
		setup: func(t *testing.T, units, proc string) {
			runningDaemon(t, proc, "42", "/usr/local/bin/containerd-sharedcontent", "--root=/mnt/shared", "--containerd-address=")
		},
		result: checkWarning,
		in:     "no daemon runs with --containerd-address set",
	}, {
		name: "unit not ordered, announcing nothing",
		setup: func(t *testing.T, units, proc string) {
			installUnit(t, units, "sc.service", strings.Replace(unordered, "ExecStart=/usr/local/bin/containerd-sharedcontent",
				"ExecStart=/usr/local/bin/containerd-sharedcontent --containerd-address=", 1))
		},
		result: checkWarning,
		in:     "sc.service runs containerd-sharedcontent but is not ordered before containerd.service",
	}, {
		name: "unit not ordered, announcing by default",
		setup: func(t *testing.T, units, proc string) {
			installUnit(t, units, "sc.service", unordered)
		},
		result: checkOK,
		in:     "sc.service runs containerd-sharedcontent with --containerd-address set (its default)",
	}, {
		name: "deploy unit",
		setup: func(t *testing.T, units, proc string) {
			installUnit(t, units, "containerd-sharedcontent.service", deployUnit(t))
		},
		result: checkOK,
		in:     "containerd-sharedcontent.service starts containerd-sharedcontent before containerd.service",
	}, {
		name: "containerd ordered after the unit by a drop-in",
		setup: func(t *testing.T, units, proc string) {
			installUnit(t, units, "sc.service", unordered)
			installUnit(t, units, "containerd.service", "[Service]\nExecStart=/usr/bin/containerd\n")
			installUnit(t, units, "containerd.service.d/10-sc.conf", "[Unit]\nWants=sc.service\nAfter=network.target sc.service\n")
		},
		result: checkOK,
		in:     "containerd.service starts after sc.service",
	}, {
		name: "unit announcing the images",
		setup: func(t *testing.T, units, proc string) {
			installUnit(t, units, "sc.service", strings.Replace(unordered, "ExecStart=/usr/local/bin/containerd-sharedcontent",
				"ExecStart=/usr/local/bin/containerd-sharedcontent --containerd-address /run/containerd/containerd.sock", 1))
		},
		result: checkOK,
		in:     "sc.service runs containerd-sharedcontent with --containerd-address set",
	}, {
		name: "running daemon announcing the images",
		setup: func(t *testing.T, units, proc string) {
			runningDaemon(t, proc, "42", "containerd-sharedcontent", "--containerd-address=/run/containerd/containerd.sock")
		},
		result: checkOK,
		in:     "the running containerd-sharedcontent has --containerd-address set",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			units, proc := bootTree(t)
			tc.setup(t, units, proc)
			results, problems, err := n.doctor(t, config)
			require.NoError(t, err, "a warning does not fail doctor")
			require.Empty(t, problems)
			r := results[bootOrderCheck]
			require.Equal(t, tc.result, r.Result, "%+v", r)
			require.Contains(t, r.Message, tc.in)
			if tc.result == checkWarning {
				require.Contains(t, r.Fix, "install "+deployPluginUnit+" (Before=containerd.service)")
				require.Contains(t, r.Fix, "--containerd-address=/run/containerd/containerd.sock")
				var out bytes.Buffer
				require.NoError(t, run([]string{"--coordinator", n.coord.URL(), "--root", n.root, "doctor", "--containerd-config", config}, &out, io.Discard))
				require.Contains(t, out.String(), "boot order: fix: run the daemon as a host service ordered before containerd")
				require.Contains(t, out.String(), "no problems, 1 warning")
			}
		})
	}
}

// TestSystemdUnitParse: continued lines, comments and drop-ins, as systemd
// reads them.
func TestSystemdUnitParse(t *testing.T) {
	units, _ := bootTree(t)
	installUnit(t, units, "x.service", "[Unit]\n# Before=containerd.service\nBefore=a.service \\\n  containerd.service\n[Service]\nExecStart=-/opt/bin/containerd-sharedcontent \\\n  --containerd-address \"\"\n")
	u := readUnit("x.service")
	require.NotNil(t, u)
	require.Equal(t, []string{"a.service", "containerd.service"}, u.keys["Before"])
	require.True(t, isPluginBinary(u.keys["ExecStart"][0]))
	require.False(t, announces(u.keys["ExecStart"][1:]), "an empty address announces nothing")
	require.Nil(t, readUnit("absent.service"))
}
