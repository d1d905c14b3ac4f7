package main

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/containerd/errdefs"
	"github.com/stretchr/testify/require"

	"github.com/sharedcontent/sharedcontent/lockserver/lockservertest"
)

// The errors a new operator meets first name what to fix: the flag, the
// token, the URL's form.

// TestReadNeedsAdminToken: a coordinator with node tokens answers a read
// (node ls) only with a token, and an admin call (node forget) only with
// the admin token; without it, or with a node's, the error says which
// token and which flag.
func TestReadNeedsAdminToken(t *testing.T) {
	c := lockservertest.Start(t, lockservertest.WithNodeTokens(map[string]string{"node-1": "node-1-token"}),
		lockservertest.WithAdminToken("admin-token"))
	dir := t.TempDir()
	file := func(name, token string) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte(token+"\n"), 0o600))
		return p
	}
	nodeToken, adminToken := file("node-token", "node-1-token"), file("admin-token", "admin-token")
	for _, tc := range []struct {
		name  string
		args  []string
		given string
	}{
		{"read, no token", []string{"node", "ls"}, "no --token-file was given"},
		{"forget, a node's token", []string{"--token-file", nodeToken, "node", "forget", "node-1"}, "--token-file " + nodeToken + " was refused"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := run(append([]string{"--coordinator", c.URL()}, tc.args...), &bytes.Buffer{}, io.Discard)
			require.Error(t, err)
			require.True(t, errdefs.IsUnauthorized(err) || errdefs.IsPermissionDenied(err), "%v", err)
			require.ErrorContains(t, err, tc.given)
			require.ErrorContains(t, err, "admin token")
			require.ErrorContains(t, err, "--admin-token-file) with --token-file")
		})
	}
	require.Contains(t, ctl(t, "--coordinator", c.URL(), "--token-file", adminToken, "node", "ls"), "NODE", "the admin token reads")
	require.Contains(t, ctl(t, "--coordinator", c.URL(), "--token-file", adminToken, "node", "forget", "node-1"),
		"node node-1 is no member: nothing to forget", "the admin token is let through; node-1 never joined")
}

// TestCoordinatorURLWithoutScheme: "host:port" is refused before any
// call, naming the flag and the URL.
func TestCoordinatorURLWithoutScheme(t *testing.T) {
	for _, server := range []string{"127.0.0.1:8642", "http://c0:8642,c1:8642"} {
		err := run([]string{"--coordinator", server, "node", "ls"}, &bytes.Buffer{}, io.Discard)
		require.True(t, errdefs.IsInvalidArgument(err), "%v", err)
		require.ErrorContains(t, err, "coordinator URL must start with http:// or https://")
		require.ErrorContains(t, err, "--coordinator")
	}
}

// TestRootMissing: a --root that does not exist is named as --root.
func TestRootMissing(t *testing.T) {
	server, _ := setup(t)
	missing := filepath.Join(t.TempDir(), "nonexistent")
	for _, cmd := range [][]string{{"du"}, {"reap", "--dry-run"}, {"refs", used}} {
		err := run(append([]string{"--coordinator", server, "--root", missing}, cmd...), &bytes.Buffer{}, io.Discard)
		require.ErrorContains(t, err, "--root "+missing)
		require.ErrorIs(t, err, os.ErrNotExist)
	}
	notDir := filepath.Join(t.TempDir(), "file")
	require.NoError(t, os.WriteFile(notDir, nil, 0o644))
	err := run([]string{"--coordinator", server, "--root", notDir, "du"}, &bytes.Buffer{}, io.Discard)
	require.True(t, errdefs.IsInvalidArgument(err), "%v", err)
	require.ErrorContains(t, err, "--root "+notDir)
}
