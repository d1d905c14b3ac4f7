package main

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestParse(t *testing.T) {
	o, err := parse([]string{"--root", "/shared", "--node-id", "n1"})
	require.NoError(t, err)
	require.Equal(t, defaultAddress, o.address)
	require.Empty(t, o.lockServer, "embedded coordinator by default")
	require.Equal(t, 15*time.Second, o.embedded.LeaseTTL)

	t.Setenv("SHAREDCONTENT_LOCK_SERVER", "http://coordinator:8642")
	t.Setenv("SHAREDCONTENT_LEASE_TTL", "20s")
	o, err = parse([]string{"--root", "/shared"})
	require.NoError(t, err)
	require.Equal(t, "http://coordinator:8642", o.lockServer)
	require.Equal(t, 20*time.Second, o.embedded.LeaseTTL)

	_, err = parse([]string{"--root", "/shared", "--lock-listen", ":8642"})
	require.ErrorContains(t, err, "--lock-listen")
	t.Setenv("SHAREDCONTENT_LOCK_SERVER", "")
	_, err = parse(nil)
	require.ErrorContains(t, err, "--root is required")
	_, err = parse([]string{"--root", "/shared", "stray"})
	require.ErrorContains(t, err, "unexpected arguments")
}

// TestRunRefusesFileRoot (issue 17): a --root that is a regular file makes
// the daemon refuse to start, with a message naming the path and the fix,
// instead of serving calls that all fail with "not a directory".
func TestRunRefusesFileRoot(t *testing.T) {
	dir := t.TempDir()
	root := filepath.Join(dir, "content")
	require.NoError(t, os.WriteFile(root, nil, 0o600))
	sock := filepath.Join(dir, "sc.sock")
	done := make(chan error, 1)
	go func() {
		done <- run([]string{"--root", root, "--node-id", "n1", "--state-dir", filepath.Join(dir, "state"),
			"--data-dir", filepath.Join(dir, "data"), "--address", sock})
	}()
	select {
	case err := <-done:
		require.ErrorContains(t, err, "shared root "+root+" is not a directory")
		require.ErrorContains(t, err, "--root")
		require.NoFileExists(t, sock, "nothing was served")
	case <-time.After(time.Minute):
		// It started: stop it (run stops on SIGTERM) and fail.
		require.NoError(t, syscall.Kill(os.Getpid(), syscall.SIGTERM))
		<-done
		t.Fatal("containerd-sharedcontent started on a root that is a regular file")
	}
}
