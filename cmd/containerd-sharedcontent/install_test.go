package main

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containerd/errdefs"
	"github.com/stretchr/testify/require"

	"github.com/sharedcontent/sharedcontent/internal/hostinstall"
)

// TestDaemonSettings: the daemon's flags become its environment file's
// variables, checked by its own flag set first.
func TestDaemonSettings(t *testing.T) {
	d, err := daemonSettings([]string{"--root=/shared", "--node-id=n1", "--coordinator=http://c:8642",
		"--metrics-listen=0.0.0.0:9642", "--adopt=false", "--reapers=n1,n2"})
	require.NoError(t, err)
	require.Equal(t, []hostinstall.EnvVar{
		{Name: "SHAREDCONTENT_ROOT", Value: "/shared"}, {Name: "SHAREDCONTENT_NODE_ID", Value: "n1"},
		{Name: "SHAREDCONTENT_COORDINATOR", Value: "http://c:8642"}, {Name: "SHAREDCONTENT_METRICS_LISTEN", Value: "0.0.0.0:9642"},
		{Name: "SHAREDCONTENT_ADOPT", Value: "false"}, {Name: "SHAREDCONTENT_REAPERS", Value: "n1,n2"},
	}, d.env)
	require.Equal(t, defaultAddress, d.opts.address)

	for args, want := range map[string]string{
		"--root /shared":                       `"--root": want --root=value`,
		"--root=/shared --no-such=1":           "has no flag --no-such",
		"--root=/shared --config=/etc/sc.toml": "a config file of the pod is not the host's",
		"--root=/shared stray":                 `"stray": want --name=value`,
		"--node-id=n1":                         "--root is required",
		"--root=/s --storage-timeout=soon":     "daemon flags",
	} {
		_, err := daemonSettings(strings.Fields(args))
		require.ErrorContains(t, err, want, args)
	}
	_, err = daemonSettings([]string{"--root=/s", "--no-such=1"})
	require.ErrorIs(t, err, errdefs.ErrInvalidArgument)
}

func TestReadyURL(t *testing.T) {
	for listen, want := range map[string]string{
		"0.0.0.0:9642":  "http://127.0.0.1:9642/readyz",
		":9642":         "http://127.0.0.1:9642/readyz",
		"[::]:9642":     "http://127.0.0.1:9642/readyz",
		"10.0.0.5:9642": "http://10.0.0.5:9642/readyz",
	} {
		u, err := readyURL(listen)
		require.NoError(t, err)
		require.Equal(t, want, u, listen)
	}
	_, err := readyURL("9642")
	require.ErrorIs(t, err, errdefs.ErrInvalidArgument)
}

// TestInstallCommand: `install --once` with the host's systemctl replaced
// by a recording script installs this very binary and the daemon's flags,
// then `install --uninstall` removes them.
func TestInstallCommand(t *testing.T) {
	dir := t.TempDir()
	host := filepath.Join(dir, "host")
	calls := filepath.Join(dir, "calls")
	script := filepath.Join(dir, "systemctl")
	require.NoError(t, os.WriteFile(script, []byte("#!/bin/sh\necho \"$*\" >>"+calls+"\n"), 0o755))
	require.NoError(t, os.MkdirAll(filepath.Join(host, "etc/containerd"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(host, hostinstall.DefaultContainerdConfig), []byte("version = 3\nimports = [\"/etc/containerd/conf.d/*.toml\"]\n"), 0o644))
	sock := filepath.Join(host, "run/sc/sc.sock")
	require.NoError(t, os.MkdirAll(filepath.Dir(sock), 0o700))
	ln, err := net.Listen("unix", sock) // the host daemon's socket
	require.NoError(t, err)
	defer ln.Close()
	go func() {
		for c, err := ln.Accept(); err == nil; c, err = ln.Accept() {
			_ = c.Close()
		}
	}()

	args := []string{"--host-root=" + host, "--systemctl=" + script, "--systemctl-in-pod", "--", "--root=/shared", "--node-id=n1",
		"--address=/run/sc/sc.sock", "--coordinator=http://c:8642"}
	require.NoError(t, runInstall(append([]string{"--once"}, args...)))
	self, err := os.ReadFile("/proc/self/exe")
	require.NoError(t, err)
	got, err := os.ReadFile(filepath.Join(host, hostinstall.BinaryPath))
	require.NoError(t, err)
	require.True(t, string(self) == string(got), "the installed binary is this one")
	env, err := os.ReadFile(filepath.Join(host, hostinstall.EnvPath))
	require.NoError(t, err)
	require.Contains(t, string(env), "\nSHAREDCONTENT_ADDRESS=\"/run/sc/sc.sock\"\n")
	b, err := os.ReadFile(calls)
	require.NoError(t, err)
	require.Equal(t, "daemon-reload\nenable containerd-sharedcontent.service\nrestart containerd-sharedcontent.service\nrestart containerd.service\n", string(b))

	// As on a node that missed helm uninstall: no daemon flags needed.
	require.NoError(t, runInstall([]string{"--uninstall", "--host-root=" + host, "--systemctl=" + script, "--systemctl-in-pod"}))
	_, err = os.Stat(filepath.Join(host, hostinstall.BinaryPath))
	require.True(t, os.IsNotExist(err))
	_, err = os.Stat(filepath.Join(host, hostinstall.DropInPath))
	require.True(t, os.IsNotExist(err))

	require.ErrorContains(t, runInstall([]string{"--systemctl= ", "--", "--root=/s"}), "--systemctl is empty")
}
