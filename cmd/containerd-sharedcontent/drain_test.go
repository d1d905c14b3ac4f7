package main

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	contentapi "github.com/containerd/containerd/api/services/content/v1"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sharedcontent/sharedcontent/cmd/internal/notifytest"
	"github.com/sharedcontent/sharedcontent/internal/version"
	"github.com/sharedcontent/sharedcontent/lockserver/lockservertest"
)

// TestRunDrainsOnSIGTERM: /healthz and /metrics name the build; on
// SIGTERM the daemon keeps serving a write in flight (its stream still
// answers) and says it drains on /readyz; it exits once the write is over.
func TestRunDrainsOnSIGTERM(t *testing.T) {
	notes := notifytest.Listen(t)
	dir := t.TempDir()
	sock := filepath.Join(dir, "sc.sock")
	metrics := lockservertest.FreeAddr(t)
	done := make(chan error, 1)
	go func() {
		done <- run([]string{"--root", filepath.Join(dir, "content"), "--node-id", "n1",
			"--state-dir", filepath.Join(dir, "state"), "--data-dir", filepath.Join(dir, "data"), "--address", sock,
			"--metrics-listen", metrics})
	}()
	notifytest.Wait(t, notes, "READY", time.Minute)
	get := func(path string) (int, string, http.Header) {
		t.Helper()
		resp, err := (&http.Client{Timeout: 5 * time.Second}).Get("http://" + metrics + path)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), resp.Header
	}
	code, body, h := get("/healthz")
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, "ok\n", body)
	require.Equal(t, version.Get().String(), h.Get(version.Header))
	_, body, _ = get("/metrics")
	require.Contains(t, body, `sharedcontent_build_info{goversion="`+version.Get().GoVersion+`"`)

	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	w, err := contentapi.NewContentClient(conn).Write(ctx)
	require.NoError(t, err)
	stat := func() {
		t.Helper()
		require.NoError(t, w.Send(&contentapi.WriteContentRequest{Action: contentapi.WriteAction_STAT, Ref: "in-flight"}))
		_, err := w.Recv()
		require.NoError(t, err)
	}
	stat()

	require.NoError(t, syscall.Kill(os.Getpid(), syscall.SIGTERM))
	notifytest.Wait(t, notes, "STOPPING", time.Minute)
	stat() // the write in flight is still served
	code, body, _ = get("/readyz")
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.True(t, strings.Contains(body, "draining"), "/readyz: %q", body)
	select {
	case err := <-done:
		t.Fatalf("the daemon stopped with a write in flight: %v", err)
	default:
	}
	require.NoError(t, w.CloseSend())
	for err == nil {
		_, err = w.Recv()
	}
	require.ErrorIs(t, err, io.EOF, "the write ended cleanly")
	require.NoError(t, <-done)
}
