package main

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sharedcontent/sharedcontent/internal/hostinstall"
)

// runAsDaemon makes this test binary run main: the installer copies the
// binary it runs from, here the test binary, and the service manager of
// TestInstallRunsDaemon starts that copy as the daemon.
const runAsDaemon = "SHAREDCONTENT_TEST_RUN_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(runAsDaemon) == "1" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// serviceManager is a shell script standing in for the host's systemctl
// for the daemon's unit: start runs the unit's ExecStart with its
// EnvironmentFile (both read from the installed unit), stop sends SIGTERM
// and waits for the process to end, restart does both; every call is
// recorded. HOST is the host root the unit's paths are under.
const serviceManager = `#!/bin/sh
HOST=%[1]q
DIR=%[2]q
UNIT="$HOST/etc/systemd/system/containerd-sharedcontent.service"
echo "$*" >>"$DIR/calls"
stop() {
	[ -f "$DIR/pid" ] || return 0
	pid=$(cat "$DIR/pid"); rm -f "$DIR/pid"
	kill -TERM "$pid" 2>/dev/null
	while kill -0 "$pid" 2>/dev/null; do sleep 0.1; done
}
start() {
	[ -f "$DIR/pid" ] && return 0
	exe=$(sed -n 's/^ExecStart=//p' "$UNIT")
	env=$(sed -n 's/^EnvironmentFile=//p' "$UNIT")
	(set -a; . "$HOST$env"; set +a; %[3]s=1 exec "$HOST$exe") >>"$DIR/daemon.log" 2>&1 &
	echo $! >"$DIR/pid"
}
case "$1 $2" in
"start containerd-sharedcontent.service") start ;;
"stop containerd-sharedcontent.service") stop ;;
"restart containerd-sharedcontent.service") stop; start ;;
esac
`

// TestInstallRunsDaemon: the installed binary, started as the installed
// unit says with the installed environment file, is a daemon that serves
// with the settings given to the installer; an install with a changed
// setting restarts it (the old process ends, a new one serves); uninstall
// stops it.
func TestInstallRunsDaemon(t *testing.T) {
	dir := t.TempDir()
	host := filepath.Join(dir, "host")
	script := filepath.Join(dir, "systemctl")
	require.NoError(t, os.WriteFile(script, []byte(fmt.Sprintf(serviceManager, host, dir, runAsDaemon)), 0o755))
	require.NoError(t, os.MkdirAll(filepath.Join(host, "etc/containerd"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(host, hostinstall.DefaultContainerdConfig),
		[]byte("version = 3\nimports = [\"/etc/containerd/conf.d/*.toml\"]\n"), 0o644))
	root := filepath.Join(dir, "content")
	require.NoError(t, os.MkdirAll(root, 0o755))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	metrics := ln.Addr().String()
	require.NoError(t, ln.Close())
	sock := filepath.Join(dir, "run", "sc.sock")
	t.Cleanup(func() { _ = exec.Command(script, "stop", hostinstall.Unit).Run() })

	install := func(extra ...string) {
		t.Helper()
		args := append([]string{"--once", "--host-root=" + host, "--systemctl=" + script, "--systemctl-in-pod",
			"--ready-url=http://" + metrics + "/readyz", "--",
			"--root=" + root, "--node-id=n1", "--address=" + sock, "--state-dir=" + filepath.Join(dir, "state"),
			"--data-dir=" + filepath.Join(dir, "db"), "--metrics-listen=" + metrics, "--containerd-address="}, extra...)
		require.NoError(t, runInstall(args), "daemon log:\n%s", readFile(filepath.Join(dir, "daemon.log")))
	}
	pid := func() int {
		n, err := strconv.Atoi(strings.TrimSpace(readFile(filepath.Join(dir, "pid"))))
		require.NoError(t, err)
		return n
	}

	install()
	first := pid()
	requireServes(t, metrics, sock)

	install("--log-level=debug")
	second := pid()
	require.NotEqual(t, first, second, "a changed setting restarts the daemon")
	require.ErrorIs(t, syscall.Kill(first, 0), syscall.ESRCH, "the old daemon ended")
	requireServes(t, metrics, sock)

	require.NoError(t, runInstall([]string{"--uninstall", "--host-root=" + host, "--systemctl=" + script, "--systemctl-in-pod"}))
	require.ErrorIs(t, syscall.Kill(second, 0), syscall.ESRCH, "uninstall stopped the daemon")
	require.Equal(t, "daemon-reload\nenable containerd-sharedcontent.service\nrestart containerd-sharedcontent.service\nrestart containerd.service\n"+
		"enable containerd-sharedcontent.service\nrestart containerd-sharedcontent.service\n"+
		"restart containerd.service\nstop containerd-sharedcontent.service\ndisable containerd-sharedcontent.service\ndaemon-reload\n",
		readFile(filepath.Join(dir, "calls")))
}

// requireServes checks the daemon answers /readyz and listens on its socket.
func requireServes(t *testing.T, metrics, sock string) {
	t.Helper()
	resp, err := http.Get("http://" + metrics + "/readyz")
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	require.Equal(t, http.StatusOK, resp.StatusCode)
	c, err := net.Dial("unix", sock)
	require.NoError(t, err, "the daemon serves on the --address given to the installer")
	require.NoError(t, c.Close())
}

func readFile(p string) string {
	b, _ := os.ReadFile(p)
	return string(b)
}
