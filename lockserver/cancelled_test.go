package lockserver

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sharedcontent/sharedcontent/lockserver/api"
)

// TestCancelThatOvertakesItsRequest: a client whose deadline ends while its
// lock request is in flight cancels it on another connection; when the
// cancel is served first, the request that follows must not be granted to
// the caller that has gone, or the key stays held for a lease TTL (seen in
// the hot-key benchmark as rounds of 0 cycles).
func TestCancelThatOvertakesItsRequest(t *testing.T) {
	ctx := context.Background()
	c := newTestCoordinator(t)
	for _, typ := range []api.OperationType{api.OperationPull, api.OperationUpdate, api.OperationDelete} {
		t.Run(string(typ), func(t *testing.T) {
			id := "blob-" + string(typ)
			gone := api.LockRequest{Type: typ, ResourceID: id, NodeID: "n1", RequestID: "r-gone"}
			require.NoError(t, c.Cancel(ctx, api.CancelRequest{Type: typ, ResourceID: id, NodeID: "n1", RequestID: "r-gone"}))

			_, err := c.Lock(ctx, gone)
			require.ErrorIs(t, err, api.ErrInvalidArgument, "the cancelled request is refused")
			require.ErrorContains(t, err, "r-gone")
			st, err := c.Status(ctx, typ, id, "", "")
			require.NoError(t, err)
			require.Nil(t, st.Holder, "nothing was granted to the caller that has gone")

			// The same node's next request (a new ID) is served as usual.
			resp, err := c.Lock(ctx, api.LockRequest{Type: typ, ResourceID: id, NodeID: "n1", RequestID: "r-next"})
			require.NoError(t, err)
			require.True(t, resp.Acquired)
			_, err = c.Unlock(ctx, api.UnlockRequest{Type: typ, ResourceID: id, LeaseID: resp.LeaseID})
			require.NoError(t, err)
		})
	}
}

// TestCancelAfterTheEndLeavesATombstone: a cancel that finds the request
// already ended (or on a key with other state) also refuses the request
// should it come again.
func TestCancelAfterTheEndLeavesATombstone(t *testing.T) {
	ctx := context.Background()
	c := newTestCoordinator(t)
	a, err := c.Lock(ctx, api.LockRequest{Type: api.OperationUpdate, ResourceID: blob, NodeID: "n1", RequestID: "r-a"})
	require.NoError(t, err)
	require.True(t, a.Acquired)
	// n2's request is cancelled while n1 holds the key: n2 is not queued yet.
	require.NoError(t, c.Cancel(ctx, api.CancelRequest{Type: api.OperationUpdate, ResourceID: blob, NodeID: "n2", RequestID: "r-b"}))
	_, err = c.Lock(ctx, api.LockRequest{Type: api.OperationUpdate, ResourceID: blob, NodeID: "n2", RequestID: "r-b"})
	require.ErrorIs(t, err, api.ErrInvalidArgument)
	st, err := c.Status(ctx, api.OperationUpdate, blob, "", "")
	require.NoError(t, err)
	require.Zero(t, st.QueueLength, "the cancelled request was not queued")
}

// TestCancelledTombstonesAreBounded: tombstones last a lease TTL, and a
// shard keeps at most maxCancelledPerShard of them.
func TestCancelledTombstonesAreBounded(t *testing.T) {
	ctx := context.Background()
	c := newTestCoordinator(t)
	cancel := func(req string) {
		require.NoError(t, c.Cancel(ctx, api.CancelRequest{Type: api.OperationPull, ResourceID: blob, NodeID: "n1", RequestID: req}))
	}
	for i := range maxCancelledPerShard + 10 {
		cancel(fmt.Sprintf("r-%d", i))
	}
	sh := c.locks.shardFor(blob)
	sh.mu.Lock()
	n := len(sh.cancelled)
	sh.mu.Unlock()
	require.Equal(t, maxCancelledPerShard, n)

	// After a lease TTL the sweep forgets them: the request is served.
	c.sweepOf(blob, time.Now().Add(c.cfg.LeaseTTL+time.Second))
	resp, err := c.Lock(ctx, api.LockRequest{Type: api.OperationPull, ResourceID: blob, NodeID: "n1", RequestID: "r-0"})
	require.NoError(t, err)
	require.True(t, resp.Acquired)
}
