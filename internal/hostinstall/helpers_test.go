package hostinstall

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// node is a host's root in a temp directory, with containerd's config
// importing conf.d, and the host's service manager: a script that records
// each systemctl call, one a line.
type node struct {
	root, calls string
	cfg         Config
}

func newNode(t *testing.T) *node {
	t.Helper()
	dir := t.TempDir()
	n := &node{root: filepath.Join(dir, "host"), calls: filepath.Join(dir, "systemctl.log")}
	script := filepath.Join(dir, "systemctl")
	require.NoError(t, os.WriteFile(script, []byte("#!/bin/sh\necho \"$*\" >>"+n.calls+"\n"), 0o755))
	n.write(t, DefaultContainerdConfig, "version = 3\n"+importLine+"\n")
	bin := filepath.Join(dir, "containerd-sharedcontent")
	require.NoError(t, os.WriteFile(bin, []byte("the daemon, version 1"), 0o755))
	n.write(t, "/pod/token", "secret-token\n")
	n.cfg = Config{
		HostRoot: n.root,
		Binary:   bin,
		Env: []EnvVar{
			{"SHAREDCONTENT_ROOT", "/mnt/shared/containerd-content"},
			{"SHAREDCONTENT_ADDRESS", "/run/sharedcontent/sharedcontent.sock"},
			{"SHAREDCONTENT_AUTH_TOKEN_FILE", "/etc/sharedcontent/auth-token"},
		},
		Files:     []File{{Source: filepath.Join(n.root, "pod/token"), Target: "/etc/sharedcontent/auth-token"}},
		Address:   "/run/sharedcontent/sharedcontent.sock",
		Platform:  "linux/amd64",
		Systemctl: []string{script},
	}
	return n
}

// serve listens on the daemon's socket, as the host daemon does once it
// serves.
func (n *node) serve(t *testing.T) {
	t.Helper()
	p := filepath.Join(n.root, n.cfg.Address)
	require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o700))
	ln, err := net.Listen("unix", p)
	require.NoError(t, err)
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_ = c.Close()
		}
	}()
}

func (n *node) write(t *testing.T, p, content string) {
	t.Helper()
	require.NoError(t, os.MkdirAll(filepath.Dir(filepath.Join(n.root, p)), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(n.root, p), []byte(content), 0o644))
}

func (n *node) read(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(n.root, p))
	require.NoError(t, err)
	return string(b)
}

func (n *node) exists(p string) bool {
	_, err := os.Lstat(filepath.Join(n.root, p))
	return err == nil
}

// takeCalls returns the systemctl calls since the last takeCalls.
func (n *node) takeCalls(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(n.calls)
	if os.IsNotExist(err) {
		return nil
	}
	require.NoError(t, err)
	require.NoError(t, os.Remove(n.calls))
	return strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
}

// files lists every regular file and socket under the host root.
func (n *node) files(t *testing.T) []string {
	t.Helper()
	var out []string
	require.NoError(t, filepath.Walk(n.root, func(p string, info os.FileInfo, err error) error {
		if err != nil || info.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(n.root, p)
		out = append(out, "/"+rel)
		return nil
	}))
	return out
}

func testCtx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return c
}
