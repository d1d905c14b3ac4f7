package lockserver

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sharedcontent/sharedcontent/lockserver/api"
)

// TestReapDeleteIgnoresDeleteCompletion: a delete's success is retained
// (completed_ttl) and answers later deletes of the blob with skip, but a
// reaper that asks to delete an orphan has just listed its file in the
// root: the blob is back (a node that failed open during an outage wrote
// it again, docs/design.md §8.8), so the old success is no answer to it.
// Skipping it left the file in the root for completed_ttl (found by
// TestChaosRealHA: two blobs left 2 minutes after every node removed its
// images). Another node's own delete still skips.
func TestReapDeleteIgnoresDeleteCompletion(t *testing.T) {
	c := newTestCoordinator(t, func(c *Config) { c.ReapGrace = 0 })
	ctx := context.Background()
	for _, n := range []string{"a", "b", "reaper"} {
		session(t, c, n)
		syncRefs(t, c, n, "s-"+n, true)
	}
	const blob = "sha256:back-after-delete"
	del, err := c.Lock(ctx, api.LockRequest{Type: api.OperationDelete, ResourceID: blob, NodeID: "a", Wait: new(false)})
	require.NoError(t, err)
	require.True(t, del.Acquired)
	_, err = c.Unlock(ctx, api.UnlockRequest{Type: api.OperationDelete, ResourceID: blob, LeaseID: del.LeaseID, NodeID: "a", Success: true})
	require.NoError(t, err)

	again, err := c.Lock(ctx, api.LockRequest{Type: api.OperationDelete, ResourceID: blob, NodeID: "b", Wait: new(false)})
	require.NoError(t, err)
	require.True(t, again.Skip, "a node's own delete after a success skips")

	_, err = c.Lock(ctx, api.LockRequest{Type: api.OperationUpdate, ResourceID: api.ReapLockResource, NodeID: "reaper", Wait: new(false)})
	require.NoError(t, err)
	reap, err := c.Lock(ctx, api.LockRequest{Type: api.OperationDelete, ResourceID: blob, NodeID: "reaper", Reap: api.ReapOrphan, Wait: new(false)})
	require.NoError(t, err)
	require.False(t, reap.Skip, "the reaper found the file: the old success is stale")
	require.True(t, reap.Acquired)
}
