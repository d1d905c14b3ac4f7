package lockserver

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sharedcontent/sharedcontent/lockserver/api"
)

// TestDeleteRuleAtomicWithSync: a delete read the resource's references
// (none), then a member's sync landed and added one, then the delete found
// every member synced and was granted: the blob the member uses was
// deleted (found by TestFaultReaper under load: the reaper removed a blob
// a cut-off node had just synced after a coordinator restart). The two
// halves of the delete rule must be one step with respect to a sync. Each
// round races a new member's first sync (which references the resource)
// against a delete of it (the reaper's, or another node's own); whichever
// comes first, the delete must be refused: before the sync the member is
// unsynced, after it the resource is referenced.
func TestDeleteRuleAtomicWithSync(t *testing.T) {
	coord := newTestCoordinator(t, func(c *Config) { c.ReapGrace = 0 })
	ctx := context.Background()
	session(t, coord, "reaper")
	syncRefs(t, coord, "reaper", "s0", true)
	_, err := coord.Lock(ctx, api.LockRequest{Type: api.OperationUpdate, ResourceID: api.ReapLockResource, NodeID: "reaper"})
	require.NoError(t, err)
	const rounds = 2000
	for i := range rounds {
		node, id := fmt.Sprintf("n-%d", i), fmt.Sprintf("sha256:race-%d", i)
		session(t, coord, node)
		reap := api.ReapOrphan
		if i%2 == 1 {
			reap = "" // the reaper node's own GC
		}
		var (
			wg      sync.WaitGroup
			start   = make(chan struct{})
			resp    api.LockResponse
			lockErr error
			syncErr error
		)
		wg.Add(2)
		go func() {
			defer wg.Done()
			<-start
			_, syncErr = coord.SyncRefs(ctx, node, api.SyncRequest{SyncID: "s", ResourceIDs: []string{id}, Done: true})
		}()
		go func() {
			defer wg.Done()
			<-start
			resp, lockErr = coord.Lock(ctx, api.LockRequest{Type: api.OperationDelete, ResourceID: id, NodeID: "reaper", Reap: reap})
		}()
		close(start)
		wg.Wait()
		require.NoError(t, syncErr)
		require.False(t, resp.Acquired, "round %d: delete (reap %q) of %s granted although %s's sync references it; refs now %v",
			i, reap, id, node, refsOf(t, coord, id))
		require.Error(t, lockErr)
	}
}
