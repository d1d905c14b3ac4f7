package lockclient

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sharedcontent/sharedcontent/internal/testutil/members"
	"github.com/sharedcontent/sharedcontent/lockserver"
	"github.com/sharedcontent/sharedcontent/lockserver/api"
	"github.com/sharedcontent/sharedcontent/lockserver/lockservertest"
)

// The embedded coordinator is a Transport.
var _ Transport = (*lockserver.Coordinator)(nil)

const blob = "sha256:4f53cda18c2baa0c0354bb5f9a3ecbe5ed12ab4d8e11ba873c2f11161202b945"

// transportHarness starts a coordinator for one test and returns a maker of
// its Clients, one per node.
type transportHarness struct {
	name  string
	setup func(t *testing.T) func(node string) *Client
}

// harnesses run the core tests against a real coordinator over HTTP and
// against the embedded coordinator (*lockserver.Coordinator). Each node
// is a synced member, as its daemon makes it at start.
func harnesses() []transportHarness {
	return []transportHarness{
		{"http", func(t *testing.T) func(string) *Client {
			ts := lockservertest.Start(t)
			return func(node string) *Client {
				members.Open(t, ts.Core(), node)
				return newHTTPClient(t, ts.URL(), node)
			}
		}},
		{"embedded", func(t *testing.T) func(string) *Client {
			l := lockservertest.NewCoordinator(t)
			return func(node string) *Client {
				members.Open(t, l, node)
				c, err := NewEmbedded(l, testOptions(node)...)
				require.NoError(t, err)
				t.Cleanup(func() { require.NoError(t, c.Close()) })
				return c
			}
		}},
	}
}

// TestCore runs the lock protocol's main paths through a Client, against
// both transports.
func TestCore(t *testing.T) {
	for _, h := range harnesses() {
		t.Run(h.name, func(t *testing.T) {
			t.Run("SuccessWakesWaitersAsSkipped", func(t *testing.T) { testSuccessSkips(t, h) })
			t.Run("FailureHandsOverInFIFOOrder", func(t *testing.T) { testFailureHandsOver(t, h) })
			t.Run("CancelLeavesQueue", func(t *testing.T) { testCancelLeavesQueue(t, h) })
			t.Run("TryLock", func(t *testing.T) { testTryLock(t, h) })
			t.Run("DeleteInUse", func(t *testing.T) { testDeleteInUse(t, h) })
		})
	}
}

// testSuccessSkips: the holder succeeds; every waiter returns Skipped with
// nothing held, and the holder's node is the reference.
func testSuccessSkips(t *testing.T, h transportHarness) {
	newClient := h.setup(t)
	ctx := context.Background()
	a, b, c := newClient("node-a"), newClient("node-b"), newClient("node-c")
	req := api.LockRequest{Type: api.OperationPull, ResourceID: blob + "-skip"}

	res, err := a.Lock(ctx, req)
	require.NoError(t, err)
	require.True(t, res.Acquired)
	require.False(t, res.Skipped)
	require.NoError(t, res.Error)
	require.NotNil(t, res.Lease)
	require.NotZero(t, res.Lease.Fence)
	require.Equal(t, "node-a", res.Lease.NodeID)

	chB := lockAsync(ctx, b, req)
	waitQueue(t, a, req.Type, req.ResourceID, "node-b")
	chC := lockAsync(ctx, c, req)
	waitQueue(t, a, req.Type, req.ResourceID, "node-b", "node-c")
	requireWaiting(t, chB, "node-b")

	require.NoError(t, a.Unlock(ctx, res.Lease, true, nil))
	for _, ch := range []<-chan outcome{chB, chC} {
		o := recv(t, ch)
		require.NoError(t, o.err)
		require.True(t, o.res.Skipped)
		require.False(t, o.res.Acquired)
		require.Nil(t, o.res.Lease)
	}
	st := status(t, a, req.Type, req.ResourceID)
	require.Nil(t, st.Holder)
	require.Empty(t, st.Queue)
	require.NotNil(t, st.Completed)
	require.Equal(t, "node-a", st.Completed.NodeID)
	refs, err := b.Refs(ctx, req.ResourceID)
	require.NoError(t, err)
	require.Equal(t, []string{"node-a"}, refs.Nodes)

	// A late request skips at once too.
	res, err = c.Lock(ctx, req)
	require.NoError(t, err)
	require.True(t, res.Skipped)
}

// testFailureHandsOver: a failed holder hands the lock to the head of the
// queue only; the others keep waiting, in order.
func testFailureHandsOver(t *testing.T, h transportHarness) {
	newClient := h.setup(t)
	ctx := context.Background()
	a, b, c, d := newClient("node-a"), newClient("node-b"), newClient("node-c"), newClient("node-d")
	req := api.LockRequest{Type: api.OperationPull, ResourceID: blob + "-handoff"}

	resA, err := a.Lock(ctx, req)
	require.NoError(t, err)
	require.True(t, resA.Acquired)
	chB := lockAsync(ctx, b, req)
	waitQueue(t, a, req.Type, req.ResourceID, "node-b")
	chC := lockAsync(ctx, c, req)
	waitQueue(t, a, req.Type, req.ResourceID, "node-b", "node-c")
	chD := lockAsync(ctx, d, req)
	waitQueue(t, a, req.Type, req.ResourceID, "node-b", "node-c", "node-d")

	require.NoError(t, a.Unlock(ctx, resA.Lease, false, errors.New("registry said 500")))
	oB := recv(t, chB)
	require.NoError(t, oB.err)
	require.True(t, oB.res.Acquired)
	require.Equal(t, "node-b", oB.res.Lease.NodeID)
	require.Greater(t, oB.res.Lease.Fence, resA.Lease.Fence)
	st := status(t, a, req.Type, req.ResourceID)
	require.Equal(t, "node-b", st.Holder.NodeID)
	require.Equal(t, oB.res.Lease.Fence, st.Holder.Fence)
	require.Equal(t, []string{"node-c", "node-d"}, queueNodes(st))
	requireWaiting(t, chC, "node-c")
	requireWaiting(t, chD, "node-d")

	require.NoError(t, b.Unlock(ctx, oB.res.Lease, false, nil))
	oC := recv(t, chC)
	require.NoError(t, oC.err)
	require.True(t, oC.res.Acquired)
	require.Greater(t, oC.res.Lease.Fence, oB.res.Lease.Fence)
	require.Equal(t, []string{"node-d"}, queueNodes(status(t, a, req.Type, req.ResourceID)))
	requireWaiting(t, chD, "node-d")

	require.NoError(t, c.Unlock(ctx, oC.res.Lease, true, nil))
	oD := recv(t, chD)
	require.NoError(t, oD.err)
	require.True(t, oD.res.Skipped)
	refs, err := a.Refs(ctx, req.ResourceID)
	require.NoError(t, err)
	require.Equal(t, []string{"node-c"}, refs.Nodes, "only the successful holder references it")
}

// testCancelLeavesQueue: cancelling a waiting Lock removes it from the
// queue, so it is not handed the lock later.
func testCancelLeavesQueue(t *testing.T, h transportHarness) {
	newClient := h.setup(t)
	ctx := context.Background()
	a, b := newClient("node-a"), newClient("node-b")
	req := api.LockRequest{Type: api.OperationPull, ResourceID: blob + "-cancel"}
	resA, err := a.Lock(ctx, req)
	require.NoError(t, err)
	require.True(t, resA.Acquired)

	bctx, cancel := context.WithCancel(ctx)
	chB := lockAsync(bctx, b, req)
	waitQueue(t, a, req.Type, req.ResourceID, "node-b")
	cancel()
	o := recv(t, chB)
	require.ErrorIs(t, o.err, context.Canceled)
	require.NotNil(t, o.res)
	require.Equal(t, o.err, o.res.Error)
	require.False(t, o.res.Acquired || o.res.Skipped)
	st := status(t, a, req.Type, req.ResourceID)
	require.Empty(t, st.Queue, "the cancelled waiter left the queue")

	// A failure now finds nobody to hand the lock to.
	require.NoError(t, a.Unlock(ctx, resA.Lease, false, nil))
	st = status(t, a, req.Type, req.ResourceID)
	require.Nil(t, st.Holder)
	require.Empty(t, st.Queue)
}

// testTryLock: TryLock never waits: api.ErrLocked while held, acquired when
// free.
func testTryLock(t *testing.T, h transportHarness) {
	newClient := h.setup(t)
	ctx := context.Background()
	a, b := newClient("node-a"), newClient("node-b")
	req := api.LockRequest{Type: api.OperationUpdate, ResourceID: blob + "-try"}
	resA, err := a.TryLock(ctx, req)
	require.NoError(t, err)
	require.True(t, resA.Acquired)

	res, err := b.TryLock(ctx, req)
	require.ErrorIs(t, err, api.ErrLocked)
	require.Equal(t, err, res.Error)
	require.Empty(t, status(t, a, req.Type, req.ResourceID).Queue, "TryLock does not queue")

	require.NoError(t, a.Unlock(ctx, resA.Lease, true, nil))
	res, err = b.TryLock(ctx, req)
	require.NoError(t, err)
	require.True(t, res.Acquired, "a completed update is not retained")
	require.NoError(t, b.Unlock(ctx, res.Lease, true, nil))
}

// testDeleteInUse: a delete of a resource another node references is
// refused with its users; AddRef records this client's node.
func testDeleteInUse(t *testing.T, h transportHarness) {
	newClient := h.setup(t)
	ctx := context.Background()
	a, b := newClient("node-a"), newClient("node-b")
	id := blob + "-inuse"
	refs, err := a.AddRef(ctx, id)
	require.NoError(t, err)
	require.Equal(t, 1, refs.Count)
	require.Nil(t, refs.Nodes, "AddRef asks for the count only")

	res, err := ClusterLock(ctx, b, &api.LockRequest{Type: api.OperationDelete, ResourceID: id})
	require.ErrorIs(t, err, api.ErrInUse)
	require.Equal(t, err, res.Error)
	var inUse *api.InUseError
	require.ErrorAs(t, err, &inUse)
	require.Equal(t, []string{"node-a"}, inUse.Refs.Nodes)

	res, err = a.Lock(ctx, api.LockRequest{Type: api.OperationDelete, ResourceID: id})
	require.NoError(t, err)
	require.True(t, res.Acquired, "the last user may delete")
	_, err = b.AddRef(ctx, id)
	require.ErrorIs(t, err, api.ErrDeleting)
	require.NoError(t, a.Unlock(ctx, res.Lease, true, nil))
	refs, err = a.Refs(ctx, id)
	require.NoError(t, err)
	require.Zero(t, refs.Count)
}

func TestRequestValidation(t *testing.T) {
	c, err := NewEmbedded(lockservertest.NewCoordinator(t), WithNodeID("n"))
	require.NoError(t, err)
	ctx := context.Background()
	for _, req := range []api.LockRequest{
		{Type: "merge", ResourceID: blob},
		{Type: api.OperationPull},
	} {
		res, err := c.Lock(ctx, req)
		require.ErrorIs(t, err, api.ErrInvalidArgument)
		require.Equal(t, err, res.Error)
	}
	res, err := ClusterLock(ctx, c, nil)
	require.ErrorIs(t, err, api.ErrInvalidArgument)
	require.Equal(t, err, res.Error)
	require.ErrorIs(t, c.Unlock(ctx, nil, true, nil), api.ErrInvalidArgument)

	for _, opts := range [][]Option{
		{WithNodeID("n"), WithMaxRetries(-1)},
		{WithNodeID("n"), WithRetryInterval(0)},
		{WithNodeID("n"), WithPollInterval(-time.Second)},
		{WithNodeID("n"), WithRequestTimeout(0)},
	} {
		_, err := New("http://127.0.0.1:1", opts...)
		require.ErrorIs(t, err, api.ErrInvalidArgument)
	}
	for _, u := range []string{"", "127.0.0.1:8080", "ftp://host", "http://", "http://host?x=1"} {
		_, err := New(u, WithNodeID("n"))
		require.ErrorIs(t, err, api.ErrInvalidArgument, u)
	}
	_, err = NewEmbedded(nil)
	require.ErrorIs(t, err, api.ErrInvalidArgument)

	require.NoError(t, c.Close())
	res, err = c.Lock(ctx, api.LockRequest{Type: api.OperationPull, ResourceID: blob})
	require.ErrorIs(t, err, api.ErrUnavailable, "a closed client takes no locks")
	require.Equal(t, err, res.Error)
}
