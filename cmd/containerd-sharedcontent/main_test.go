package main

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	contentapi "github.com/containerd/containerd/api/services/content/v1"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sharedcontent/sharedcontent/cmd/internal/notifytest"
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

// startErr runs the daemon with args and returns the error it refused to
// start with. A daemon that starts instead is stopped (run stops on
// SIGTERM) and the test fails.
func startErr(t *testing.T, args ...string) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- run(args) }()
	select {
	case err := <-done:
		require.Error(t, err)
		return err
	case <-time.After(time.Minute):
		require.NoError(t, syscall.Kill(os.Getpid(), syscall.SIGTERM))
		<-done
		t.Fatalf("containerd-sharedcontent started with %q", args)
		return nil
	}
}

// TestRunRefusesFileRoot (issue 17): a --root that is a regular file makes
// the daemon refuse to start, with a message naming the path and the fix,
// instead of serving calls that all fail with "not a directory".
func TestRunRefusesFileRoot(t *testing.T) {
	dir := t.TempDir()
	root := filepath.Join(dir, "content")
	require.NoError(t, os.WriteFile(root, nil, 0o600))
	sock := filepath.Join(dir, "sc.sock")
	err := startErr(t, "--root", root, "--node-id", "n1", "--state-dir", filepath.Join(dir, "state"),
		"--data-dir", filepath.Join(dir, "data"), "--address", sock)
	require.ErrorContains(t, err, "shared root "+root+" is not a directory")
	require.ErrorContains(t, err, "--root")
	require.NoFileExists(t, sock, "nothing was served")
}

// TestRunRefusesExposedTokenFile (issue 17): the token the daemon sends to
// a remote coordinator is refused when its file is readable by others.
func TestRunRefusesExposedTokenFile(t *testing.T) {
	dir := t.TempDir()
	token := filepath.Join(dir, "token")
	require.NoError(t, os.WriteFile(token, []byte("s3cret\n"), 0o600))
	require.NoError(t, os.Chmod(token, 0o644))
	sock := filepath.Join(dir, "sc.sock")
	err := startErr(t, "--root", filepath.Join(dir, "content"), "--node-id", "n1", "--state-dir", filepath.Join(dir, "state"),
		"--lock-server", "http://127.0.0.1:1", "--auth-token-file", token, "--address", sock)
	require.ErrorContains(t, err, "token file "+token)
	require.ErrorContains(t, err, "chmod 600")
	require.NoFileExists(t, sock, "nothing was served")
}

// TestRunNotifiesReady (issue 16): under systemd (Type=notify) the daemon
// sends READY=1 once its socket serves, so containerd, ordered after it,
// finds its content and diff proxies answering; it sends STOPPING=1 on
// SIGTERM.
func TestRunNotifiesReady(t *testing.T) {
	notes := notifytest.Listen(t)
	dir := t.TempDir()
	sock := filepath.Join(dir, "sc.sock")
	done := make(chan error, 1)
	go func() {
		done <- run([]string{"--root", filepath.Join(dir, "content"), "--node-id", "n1",
			"--state-dir", filepath.Join(dir, "state"), "--data-dir", filepath.Join(dir, "data"), "--address", sock})
	}()

	msg := notifytest.Wait(t, notes, "READY", time.Minute)
	require.Equal(t, "1", msg["READY"])
	require.Equal(t, "serving on "+sock, msg["STATUS"])
	// Served at once: a call that does not wait for the connection.
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err = contentapi.NewContentClient(conn).ListStatuses(ctx, &contentapi.ListStatusesRequest{})
	require.NoError(t, err, "the content API answers when READY=1 arrives")

	require.NoError(t, syscall.Kill(os.Getpid(), syscall.SIGTERM))
	notifytest.Wait(t, notes, "STOPPING", time.Minute)
	require.NoError(t, <-done)
}
