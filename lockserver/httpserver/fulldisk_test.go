package httpserver

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sharedcontent/sharedcontent/lockserver"
	"github.com/sharedcontent/sharedcontent/lockserver/api"
	"github.com/sharedcontent/sharedcontent/refcount"
)

// TestFullDisk (docs/design.md §3.4): an unlock whose reference write fails
// answers 503 unavailable and changes nothing — the holder keeps its lock,
// its waiter is not told to skip, no completion and no reference appear —
// and /readyz is unready. Once space returns, /readyz recovers by itself
// and the holder's retry applies the unlock whole.
//
// "tmpfs" fills a real 4 MiB tmpfs under the real bbolt database (root
// only); "injected" fails every write of the same interfaces the database
// implements.
func TestFullDisk(t *testing.T) {
	t.Run("tmpfs", func(t *testing.T) {
		if os.Geteuid() != 0 {
			t.Skip("mounting a tmpfs needs root; the injected variant covers the logic")
		}
		dir := t.TempDir()
		if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size=4m"); err != nil {
			t.Skipf("mounting a tmpfs: %v", err)
		}
		t.Cleanup(func() { _ = syscall.Unmount(dir, syscall.MNT_DETACH) })
		ts := startServer(t, filepath.Join(dir, "db"))
		filler := filepath.Join(dir, "filler")
		checkFullDisk(t, ts.url, func() { fill(t, filler) }, func() { require.NoError(t, os.Remove(filler)) })
	})
	t.Run("injected", func(t *testing.T) {
		disk := &fullDisk{Storage: refcount.NewMemoryStorage()}
		l, err := lockserver.NewCoordinator(lockserver.DefaultConfig(), lockserver.Options{Refs: refcount.NewManager(disk)})
		require.NoError(t, err)
		t.Cleanup(func() { l.Close() })
		base := serveHandler(t, NewHandler(l))
		checkFullDisk(t, base, func() { disk.full.Store(true) }, func() { disk.full.Store(false) })
	})
}

func checkFullDisk(t *testing.T, base string, fill, free func()) {
	// n1 holds a session, as its daemon does: a pull's unlock records
	// its reference only then (docs/design.md §8.4).
	code, body := post(t, base, "/nodes/session", api.SessionRequest{NodeID: "n1"})
	require.Equal(t, http.StatusOK, code, string(body))
	// grant locks res for n1, with n2 queued behind it; false when the
	// database refused the grant's write (a pull's lease is recorded
	// before it is answered: docs/design.md §3.7).
	grant := func(res string) (holder, waiter api.LockResponse, ok bool) {
		code, body := post(t, base, "/lock", api.LockRequest{Type: api.OperationPull, ResourceID: res, NodeID: "n1"})
		if code == http.StatusServiceUnavailable {
			require.Equal(t, api.CodeUnavailable, decodeAs[api.ErrorResponse](t, body).Code)
			return holder, waiter, false
		}
		require.Equal(t, http.StatusOK, code, string(body))
		holder = decodeAs[api.LockResponse](t, body)
		code, body = post(t, base, "/lock", api.LockRequest{Type: api.OperationPull, ResourceID: res, NodeID: "n2"})
		require.Equal(t, http.StatusOK, code, string(body))
		waiter = decodeAs[api.LockResponse](t, body)
		require.True(t, holder.Acquired)
		require.True(t, waiter.Queued)
		return holder, waiter, true
	}
	// The first grant persists the fence high-water mark (a block of
	// fences) and creates the database's buckets.
	warm, _, ok := grant("sha256:warm")
	require.True(t, ok)
	code, body = post(t, base, "/unlock", api.UnlockRequest{Type: api.OperationPull, ResourceID: "sha256:warm", LeaseID: warm.LeaseID, Success: true})
	require.Equal(t, http.StatusOK, code, string(body))
	resource := func(i int) string { return fmt.Sprintf("sha256:%064x", i) }
	res := resource(0)
	holder, waiter, held := grant(res)
	require.True(t, held)
	fill()
	// A full disk may still take a few writes into pages the database
	// had already allocated: grant the next resource, then unlock the
	// one held, until an unlock fails.
	var req api.UnlockRequest
	for i := 1; ; i++ {
		require.Less(t, i, 100000, "no write failed on a full disk")
		if !held {
			res = resource(i)
			holder, waiter, held = grant(res)
			continue
		}
		nextHolder, nextWaiter, granted := grant(resource(i))
		req = api.UnlockRequest{Type: api.OperationPull, ResourceID: res, LeaseID: holder.LeaseID, Success: true}
		code, body := post(t, base, "/unlock", req)
		if code != http.StatusOK {
			require.Equal(t, http.StatusServiceUnavailable, code, string(body))
			require.Equal(t, api.CodeUnavailable, decodeAs[api.ErrorResponse](t, body).Code)
			break
		}
		res, holder, waiter, held = resource(i), nextHolder, nextWaiter, granted
	}

	code, body = get(t, base, "/lock/status", url.Values{"type": {"pull"}, "resource_id": {res}, "node_id": {"n2"}, "request_id": {waiter.RequestID}})
	require.Equal(t, http.StatusOK, code, string(body))
	st := decodeAs[api.StatusResponse](t, body)
	require.NotNil(t, st.Holder, "the lock stays held")
	require.Equal(t, "n1", st.Holder.NodeID)
	require.Nil(t, st.Completed, "no completion is recorded")
	require.NotNil(t, st.Request)
	require.True(t, st.Request.Queued, "the waiter is not told to skip")
	require.False(t, st.Request.Skip)
	code, body = get(t, base, "/refs", url.Values{"resource_id": {res}})
	require.Equal(t, http.StatusOK, code, string(body))
	require.Empty(t, decodeAs[api.RefsResponse](t, body).Nodes)
	code, body = get(t, base, "/readyz", nil)
	require.Equal(t, http.StatusServiceUnavailable, code, "unready while the database cannot write: %s", body)

	free()
	code, body = get(t, base, "/readyz", nil)
	require.Equal(t, http.StatusOK, code, "ready again once space returns, without a restart: %s", body)
	code, body = post(t, base, "/unlock", req)
	require.Equal(t, http.StatusOK, code, "the holder's retry: %s", body)
	code, body = get(t, base, "/lock/status", url.Values{"type": {"pull"}, "resource_id": {res}, "node_id": {"n2"}, "request_id": {waiter.RequestID}})
	require.Equal(t, http.StatusOK, code, string(body))
	st = decodeAs[api.StatusResponse](t, body)
	require.Nil(t, st.Holder)
	require.NotNil(t, st.Completed)
	require.True(t, st.Request.Skip, "the waiter skips now")
	code, body = get(t, base, "/refs", url.Values{"resource_id": {res}})
	require.Equal(t, http.StatusOK, code, string(body))
	require.Equal(t, []string{"n1"}, decodeAs[api.RefsResponse](t, body).Nodes)
}

// fill writes path until the filesystem is full.
func fill(t *testing.T, path string) {
	f, err := os.Create(path)
	require.NoError(t, err)
	defer f.Close()
	buf := make([]byte, 64<<10)
	for {
		if _, err := f.Write(buf); err != nil {
			require.ErrorIs(t, err, syscall.ENOSPC)
			return
		}
	}
}

// fullDisk is a coordinator storage that refuses every write while full,
// as a database on a full disk does.
type fullDisk struct {
	refcount.Storage
	full atomic.Bool
}

var errNoSpace = fmt.Errorf("write: %w", syscall.ENOSPC)

func (d *fullDisk) Commit(ctx context.Context, b *refcount.Batch) error {
	if d.full.Load() {
		return errNoSpace
	}
	return d.Storage.Commit(ctx, b)
}

// serveHandler serves h on a loopback port until the test ends and returns
// its base URL.
func serveHandler(t *testing.T, h *Handler) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := h.HTTPServer()
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	t.Cleanup(func() {
		h.Drain()
		require.NoError(t, srv.Shutdown())
		require.NoError(t, <-done)
	})
	return "http://" + ln.Addr().String()
}
