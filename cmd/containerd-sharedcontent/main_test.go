package main

import (
	"context"
	"flag"
	"io"
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
	"github.com/sharedcontent/sharedcontent/internal/testutil/logbuf"
)

func TestParse(t *testing.T) {
	o, err := parse([]string{"--root", "/shared", "--node-id", "n1"})
	require.NoError(t, err)
	require.Equal(t, defaultAddress, o.address)
	require.Empty(t, o.coordinatorURL, "embedded coordinator by default")
	require.Equal(t, 15*time.Second, o.embedded.LeaseTTL)
	require.Equal(t, 30*time.Second, o.storageTimeout)
	o, err = parse([]string{"--root", "/shared", "--storage-timeout", "2m"})
	require.NoError(t, err)
	require.Equal(t, 2*time.Minute, o.storageTimeout)
	_, err = parse([]string{"--root", "/shared", "--storage-timeout", "0s"})
	require.ErrorContains(t, err, "--storage-timeout")

	t.Setenv("SHAREDCONTENT_LOCK_SERVER", "http://coordinator:8642")
	t.Setenv("SHAREDCONTENT_LEASE_TTL", "20s")
	o, err = parse([]string{"--root", "/shared"})
	require.NoError(t, err)
	require.Equal(t, "http://coordinator:8642", o.coordinatorURL)
	require.Equal(t, 20*time.Second, o.embedded.LeaseTTL)

	_, err = parse([]string{"--root", "/shared", "--lock-listen", ":8642"})
	require.ErrorContains(t, err, "--coordinator-listen")
	t.Setenv("SHAREDCONTENT_LOCK_SERVER", "")
	_, err = parse(nil)
	require.ErrorContains(t, err, "--root is required")
	_, err = parse([]string{"--root", "/shared", "stray"})
	require.ErrorContains(t, err, "unexpected arguments")
}

// TestParseRefusesLeaseOutlivingFailOpen: with the embedded coordinator a
// delete lease must end before a cut-off member may fail open
// (docs/design.md §8.8); with a remote one the flags are not used.
func TestParseRefusesLeaseOutlivingFailOpen(t *testing.T) {
	_, err := parse([]string{"--root", "/shared", "--node-id", "n1", "--lease-ttl", "60s", "--session-ttl", "15s"})
	require.ErrorContains(t, err, "--lease-ttl 1m0s")
	require.ErrorContains(t, err, "23.5s")
	_, err = parse([]string{"--root", "/shared", "--node-id", "n1", "--lease-ttl", "23s", "--session-ttl", "15s"})
	require.NoError(t, err)
	_, err = parse([]string{"--root", "/shared", "--node-id", "n1", "--lease-ttl", "60s", "--coordinator", "http://c:8642"})
	require.NoError(t, err, "a remote coordinator checks its own")
}

// TestParseCoordinatorNames: the flags say "coordinator" (and
// --wait-by-default); the old names (flags and environment variables)
// still work, the new ones win.
func TestParseCoordinatorNames(t *testing.T) {
	o, err := parse([]string{"--root", "/shared", "--coordinator", "https://new:8642", "--coordinator-ca", "/ca.pem"})
	require.NoError(t, err)
	require.Equal(t, "https://new:8642", o.coordinatorURL)
	require.Equal(t, "/ca.pem", o.coordinatorCA)

	o, err = parse([]string{"--root", "/shared", "--lock-server", "https://old:8642", "--lock-server-ca", "/old-ca.pem"})
	require.NoError(t, err)
	require.Equal(t, "https://old:8642", o.coordinatorURL)
	require.Equal(t, "/old-ca.pem", o.coordinatorCA)

	o, err = parse([]string{"--root", "/shared", "--lock-listen", "127.0.0.1:0"})
	require.NoError(t, err)
	require.Equal(t, "127.0.0.1:0", o.coordinatorListen)
	o, err = parse([]string{"--root", "/shared", "--coordinator-listen", "127.0.0.1:1"})
	require.NoError(t, err)
	require.Equal(t, "127.0.0.1:1", o.coordinatorListen)

	o, err = parse([]string{"--root", "/shared", "--allow-multi-node-download=false"})
	require.NoError(t, err)
	require.False(t, o.embedded.WaitByDefault, "the old name of --wait-by-default")

	t.Setenv("SHAREDCONTENT_LOCK_SERVER", "http://old-env:8642")
	o, err = parse([]string{"--root", "/shared"})
	require.NoError(t, err)
	require.Equal(t, "http://old-env:8642", o.coordinatorURL, "the old variable still works")
	t.Setenv("SHAREDCONTENT_COORDINATOR", "http://new-env:8642")
	o, err = parse([]string{"--root", "/shared"})
	require.NoError(t, err)
	require.Equal(t, "http://new-env:8642", o.coordinatorURL, "the new variable wins")
}

// TestHelpShowsCoordinatorNames: --help lists the new names as flags and
// the old ones only as deprecated.
func TestHelpShowsCoordinatorNames(t *testing.T) {
	stderr := os.Stderr
	r, w, err := os.Pipe()
	require.NoError(t, err)
	os.Stderr = w
	_, err = parse([]string{"--help"})
	os.Stderr = stderr
	require.NoError(t, w.Close())
	require.ErrorIs(t, err, flag.ErrHelp)
	help, err := io.ReadAll(r)
	require.NoError(t, err)
	for _, f := range []string{"--coordinator  [SHAREDCONTENT_COORDINATOR]", "--coordinator-ca  [SHAREDCONTENT_COORDINATOR_CA]", "--coordinator-listen  [SHAREDCONTENT_COORDINATOR_LISTEN]"} {
		require.Contains(t, string(help), f)
	}
	require.NotContains(t, string(help), "--lock-server  [")
	require.Contains(t, string(help), "--lock-server (--coordinator)")
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

// TestRunRefusesFileRoot: a --root that is a regular file makes
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

// TestRunRefusesExposedTokenFile (docs/security.md "Token files"): the token the daemon sends to
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

// TestRunNotifiesReady (docs/operations.md "systemd"): under systemd (Type=notify) the daemon
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

// TestRunDoesNotWarnOfFSVerity: opening containerd's local store logs
// "failed check for fsverity support" on every file system without
// fs-verity; the daemon drops that warning at its default level (and
// keeps its other log lines).
func TestRunDoesNotWarnOfFSVerity(t *testing.T) {
	buf := logbuf.Capture(t)
	notes := notifytest.Listen(t)
	dir := t.TempDir()
	done := make(chan error, 1)
	go func() {
		done <- run([]string{"--root", filepath.Join(dir, "content"), "--node-id", "n1",
			"--state-dir", filepath.Join(dir, "state"), "--data-dir", filepath.Join(dir, "data"), "--address", filepath.Join(dir, "sc.sock")})
	}()
	notifytest.Wait(t, notes, "READY", time.Minute)
	require.NoError(t, syscall.Kill(os.Getpid(), syscall.SIGTERM))
	require.NoError(t, <-done)
	logged := buf.String()
	require.Contains(t, logged, "containerd-sharedcontent ready", "the daemon's log was captured")
	require.NotContains(t, logged, "fsverity")
}

// TestParseCoordinatorList: --coordinator takes the URLs of a
// coordinator's replicas; a bad list is refused at start, naming the bad
// URL.
func TestParseCoordinatorList(t *testing.T) {
	o, err := parse([]string{"--root", "/shared", "--coordinator", "https://c0:8642,https://c1:8642"})
	require.NoError(t, err)
	require.Equal(t, "https://c0:8642,https://c1:8642", o.coordinatorURL)
	_, err = parse([]string{"--root", "/shared", "--coordinator", "https://c0:8642,c1:8642"})
	require.ErrorContains(t, err, `--coordinator: lockclient: coordinator URL list "https://c0:8642,c1:8642": server URL "c1:8642"`)
}
