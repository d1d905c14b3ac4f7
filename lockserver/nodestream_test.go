package lockserver

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sharedcontent/sharedcontent/lockserver/api"
)

// takeEvents takes what waits on s; ok is false once s has ended.
func takeEvents(t *testing.T, s *NodeStream) ([]api.Event, bool) {
	t.Helper()
	select {
	case <-s.Ready():
	case <-time.After(10 * time.Second):
		t.Fatal("the node stream was never signalled")
	}
	return s.Take(nil)
}

// TestNodeStreamCarriesOutcomes (docs/design.md §10.1): a node's stream gets the outcome of each of its queued requests,
// tagged with the request ID; once it is closed, a grant waits for its
// claim by /lock/status.
func TestNodeStreamCarriesOutcomes(t *testing.T) {
	ctx := context.Background()
	c := newTestCoordinator(t)
	a := mustLock(t, c, api.OperationUpdate, "n1")
	ns, err := c.OpenNodeStream("n2")
	require.NoError(t, err)
	b1 := mustLock(t, c, api.OperationUpdate, "n2")
	b2 := mustLock(t, c, api.OperationUpdate, "n2")
	require.True(t, b1.Queued)
	require.True(t, b2.Queued)
	require.Equal(t, 1, c.NodeStreams())

	unlock(t, c, api.OperationUpdate, a.LeaseID, false)
	evs, ok := takeEvents(t, ns)
	require.True(t, ok)
	require.Len(t, evs, 1)
	require.Equal(t, api.EventGranted, evs[0].Name)
	require.Equal(t, b1.RequestID, evs[0].RequestID)
	require.NotNil(t, evs[0].Lease)
	st, err := c.Status(ctx, api.OperationUpdate, blob, "", "")
	require.NoError(t, err)
	require.False(t, st.Holder.Claimed, "not claimed before it is written")
	ns.Claimed(api.OperationUpdate, blob, evs[0].Lease.LeaseID)
	st, err = c.Status(ctx, api.OperationUpdate, blob, "", "")
	require.NoError(t, err)
	require.True(t, st.Holder.Claimed)

	// Closed: b2 keeps its place, and its grant waits for a status.
	ns.Close()
	require.Zero(t, c.NodeStreams())
	_, ok = ns.Take(nil)
	require.False(t, ok)
	unlock(t, c, api.OperationUpdate, evs[0].Lease.LeaseID, false)
	st, err = c.Status(ctx, api.OperationUpdate, blob, "n2", b2.RequestID)
	require.NoError(t, err)
	require.True(t, st.Request.Acquired, "a grant made while the stream was closed is found")
	st, err = c.Status(ctx, api.OperationUpdate, blob, "", "")
	require.NoError(t, err)
	require.True(t, st.Holder.Claimed, "the status claimed it")
}

// TestNodeStreamKeepsWaiters: a stream-less waiter whose node has a
// stream is not dropped for not polling; a lease TTL after the stream
// closed, it is.
func TestNodeStreamKeepsWaiters(t *testing.T) {
	c := newTestCoordinator(t)
	clock := useFakeClock(c)
	ttl := c.cfg.LeaseTTL
	a := mustLock(t, c, api.OperationUpdate, "n1")
	ns, err := c.OpenNodeStream("n2")
	require.NoError(t, err)
	mustLock(t, c, api.OperationUpdate, "n2")
	queued := func() bool {
		t.Helper()
		st, err := c.Status(context.Background(), api.OperationUpdate, blob, "", "")
		require.NoError(t, err)
		return st.QueueLength == 1
	}
	// The holder stays (keepalives), so only the waiter can go.
	var kept time.Duration
	sweepAt := func(d time.Duration) {
		t.Helper()
		for ; kept < d; kept += ttl / 2 {
			clock.at(kept)
			_, err := c.Keepalive(context.Background(), api.KeepaliveRequest{Type: api.OperationUpdate, ResourceID: blob, LeaseID: a.LeaseID})
			require.NoError(t, err)
		}
		clock.at(d)
		c.sweepOf(blob, c.now())
	}
	sweepAt(3 * ttl)
	require.True(t, queued(), "the node's stream carries it")
	ns.Close()
	sweepAt(3*ttl + ttl/2)
	require.True(t, queued(), "kept a lease TTL after the stream closed")
	sweepAt(5 * ttl)
	require.False(t, queued(), "dropped once the node neither streams nor polls")
}

// TestNodeStreamReplaced: a node has one stream; a newer one ends the
// older, and an empty node ID is refused.
func TestNodeStreamReplaced(t *testing.T) {
	c := newTestCoordinator(t)
	old, err := c.OpenNodeStream("n2")
	require.NoError(t, err)
	cur, err := c.OpenNodeStream("n2")
	require.NoError(t, err)
	_, ok := takeEvents(t, old)
	require.False(t, ok, "the older stream ended")
	old.Close() // changes nothing for the newer one
	require.Equal(t, 1, c.NodeStreams())
	cur.Close()
	require.Zero(t, c.NodeStreams())
	_, err = c.OpenNodeStream("")
	require.ErrorIs(t, err, api.ErrInvalidArgument)
}
