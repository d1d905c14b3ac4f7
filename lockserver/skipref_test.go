package lockserver

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sharedcontent/sharedcontent/lockserver/api"
)

// TestSkipAddsQueuedWaitersRefs (docs/design.md §10.6, lever c): the
// waiters queued when a pull's holder unlocks with success are told skip;
// those that asked for their reference (add_ref) have it recorded in the
// holder's write and are told so (RefAdded, on the event and on a poll);
// one that did not ask, and one without a live session, are told skip
// without it and hold no reference.
func TestSkipAddsQueuedWaitersRefs(t *testing.T) {
	ctx := context.Background()
	c := newTestCoordinator(t)
	members(t, c, "holder", "asks", "silent")
	h := mustLock(t, c, api.OperationPull, "holder")
	require.True(t, h.Acquired)

	queue := func(node string, addRef bool) *Subscription {
		t.Helper()
		resp, err := c.Lock(ctx, api.LockRequest{Type: api.OperationPull, ResourceID: blob, NodeID: node, RequestID: "r-" + node, AddRef: addRef})
		require.NoError(t, err)
		require.True(t, resp.Queued)
		sub, err := c.Subscribe(api.OperationPull, blob, node, "r-"+node)
		require.NoError(t, err)
		t.Cleanup(sub.Close)
		return sub
	}
	asks := queue("asks", true)
	silent := queue("silent", false)
	stranger := queue("stranger", true) // never opened a session: the reference rule refuses it

	unlock(t, c, api.OperationPull, h.LeaseID, true)
	for _, w := range []struct {
		sub      *Subscription
		refAdded bool
	}{{asks, true}, {silent, false}, {stranger, false}} {
		ev := receive(t, w.sub.Events())
		require.Equal(t, api.EventCompleted, ev.Name)
		require.Equal(t, w.refAdded, ev.RefAdded, "node %s", ev.NodeID)
	}
	require.ElementsMatch(t, []string{"holder", "asks"}, refsOf(t, c, blob), "only the asking member's reference comes with the skip")

	st, err := c.Status(ctx, api.OperationPull, blob, "asks", "r-asks")
	require.NoError(t, err)
	require.True(t, st.Request.Skip)
	require.True(t, st.Request.RefAdded, "a poll of the skipped request says its reference was recorded")
	st, err = c.Status(ctx, api.OperationPull, blob, "silent", "r-silent")
	require.NoError(t, err)
	require.True(t, st.Request.Skip)
	require.False(t, st.Request.RefAdded)
}

// TestSkipAtOnceAddsRef: a pull asking for its reference that is answered
// skip at once (a retained success) has it recorded before the answer;
// one that does not ask has none; a node without a live session is
// answered skip without it (it adds its own, and is refused as before).
func TestSkipAtOnceAddsRef(t *testing.T) {
	ctx := context.Background()
	c := newTestCoordinator(t)
	members(t, c, "holder", "late", "plain")
	h := mustLock(t, c, api.OperationPull, "holder")
	unlock(t, c, api.OperationPull, h.LeaseID, true)

	resp, err := c.Lock(ctx, api.LockRequest{Type: api.OperationPull, ResourceID: blob, NodeID: "plain"})
	require.NoError(t, err)
	require.True(t, resp.Skip)
	require.False(t, resp.RefAdded)
	resp, err = c.Lock(ctx, api.LockRequest{Type: api.OperationPull, ResourceID: blob, NodeID: "stranger", AddRef: true})
	require.NoError(t, err)
	require.True(t, resp.Skip)
	require.False(t, resp.RefAdded, "no live session: no reference")
	require.ElementsMatch(t, []string{"holder"}, refsOf(t, c, blob))

	resp, err = c.Lock(ctx, api.LockRequest{Type: api.OperationPull, ResourceID: blob, NodeID: "late", AddRef: true})
	require.NoError(t, err)
	require.True(t, resp.Skip)
	require.True(t, resp.RefAdded)
	require.ElementsMatch(t, []string{"holder", "late"}, refsOf(t, c, blob))
}

// TestAddRefOnlyOnPulls: add_ref on a delete or an update is refused
// (400 invalid_argument, naming the lock) and changes nothing.
func TestAddRefOnlyOnPulls(t *testing.T) {
	ctx := context.Background()
	c := newTestCoordinator(t)
	members(t, c, "n1")
	for _, typ := range []api.OperationType{api.OperationDelete, api.OperationUpdate} {
		_, err := c.Lock(ctx, api.LockRequest{Type: typ, ResourceID: blob, NodeID: "n1", AddRef: true})
		require.ErrorIs(t, err, api.ErrInvalidArgument)
		require.ErrorContains(t, err, string(typ)+":"+blob)
		st, err := c.Status(ctx, typ, blob, "", "")
		require.NoError(t, err)
		require.Nil(t, st.Holder, "a refused request holds nothing")
	}
	require.Empty(t, refsOf(t, c, blob))
}
