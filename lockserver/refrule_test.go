package lockserver

import (
	"context"
	"testing"
	"time"

	"github.com/containerd/errdefs"
	"github.com/stretchr/testify/require"

	"github.com/sharedcontent/sharedcontent/lockserver/api"
)

// requireNoSession fails unless err is the reference rule's refusal of
// node (docs/design.md §8.4).
func requireNoSession(t *testing.T, err error, node string) {
	t.Helper()
	require.ErrorIs(t, err, api.ErrNoSession)
	require.True(t, errdefs.IsFailedPrecondition(err), "%v", err)
	require.ErrorContains(t, err, "node "+node)
	require.ErrorContains(t, err, "open its session, then retry")
	status, code := api.HTTPStatus(err)
	require.Equal(t, 409, status)
	require.Equal(t, api.CodeNoSession, code)
}

// TestNoReferenceWithoutSession: the reference rule, one for every path
// that adds a reference. A node whose session lapsed, one forgotten, and
// one that never joined are each refused on refs/add (committing or
// found), a pull's unlock with success and a sync, with nothing recorded
// (the pull lock stays held: its holder retries); a pull lease of a
// holder without a session that expires records nothing either. Once the
// node has opened its session again, each works.
//
// Before, refs/add and the pull's unlock recorded a reference for any
// node: one forgotten kept it for ever (no sync of a non-member replaces
// it; expiry and forget need a member).
func TestNoReferenceWithoutSession(t *testing.T) {
	ctx := context.Background()
	c := newTestCoordinator(t)
	clock := useFakeClock(c)
	syncedNode(t, c, "n1")
	syncedNode(t, c, "n2")
	p := mustLock(t, c, api.OperationPull, "n1")
	require.True(t, p.Acquired)
	const other = "sha256:b4"
	e, err := c.Lock(ctx, api.LockRequest{Type: api.OperationPull, ResourceID: other, NodeID: "n2"})
	require.NoError(t, err)
	require.True(t, e.Acquired)
	clock.at(c.cfg.SessionTTL + time.Millisecond) // both sessions lapsed
	require.False(t, live(t, c, "n1"))

	_, err = c.AddRef(ctx, "sha256:b1", "n1")
	requireNoSession(t, err, "n1")
	_, err = c.AddFoundRef(ctx, "sha256:b1", "n1")
	requireNoSession(t, err, "n1")
	_, err = c.Unlock(ctx, api.UnlockRequest{Type: api.OperationPull, ResourceID: blob, LeaseID: p.LeaseID, NodeID: "n1", Success: true})
	requireNoSession(t, err, "n1")
	_, err = c.SyncRefs(ctx, "n1", api.SyncRequest{SyncID: "late", ResourceIDs: []string{"sha256:b2"}, Done: true})
	requireNoSession(t, err, "n1")
	require.Empty(t, refsOf(t, c, "sha256:b1"), "nothing recorded")
	require.Empty(t, refsOf(t, c, blob), "nothing recorded")
	require.Empty(t, refsOf(t, c, "sha256:b2"), "nothing recorded")
	require.True(t, mustLock(t, c, api.OperationPull, "n3").Queued, "the refused unlock changed nothing: n1 still holds the pull lock")

	// n2's pull lease expires: no reference for a holder without a
	// session; deletes wait for n2 (unsynced), whose next sync carries
	// the blob if it committed it.
	c.sweepOf(other, c.now().Add(c.cfg.LeaseTTL+time.Second))
	require.Empty(t, refsOf(t, c, other), "nothing recorded at the lease's expiry")
	_, err = c.Lock(ctx, api.LockRequest{Type: api.OperationDelete, ResourceID: other, NodeID: "n3"})
	require.ErrorIs(t, err, api.ErrUnsynced, "the blob is safe: deletes wait for n2")

	for _, n := range []string{"n9", "n2"} { // never joined; forgotten
		if n == "n2" {
			require.NoError(t, c.Forget(ctx, "n2"))
		}
		_, err = c.AddRef(ctx, "sha256:b1", n)
		requireNoSession(t, err, n)
		require.ErrorContains(t, err, "is not a member")
		require.Empty(t, refsOf(t, c, "sha256:b1"), "nothing recorded")
	}

	// Opened again, n1 is referenced by each path.
	_, err = c.Session(ctx, sessionReq("n1", nil))
	require.NoError(t, err)
	_, err = c.AddRef(ctx, "sha256:b1", "n1")
	require.NoError(t, err)
	_, err = c.AddFoundRef(ctx, "sha256:b3", "n1")
	require.NoError(t, err)
	unlock(t, c, api.OperationPull, p.LeaseID, true)
	require.Equal(t, []string{"n1"}, refsOf(t, c, "sha256:b1"))
	require.Equal(t, []string{"n1"}, refsOf(t, c, "sha256:b3"))
	require.Equal(t, []string{"n1"}, refsOf(t, c, blob))
}
