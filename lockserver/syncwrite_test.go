package lockserver

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sharedcontent/sharedcontent/lockserver/api"
)

// stopWrites makes every sync write of node stop at each stage (before
// its replace, after it) until the test lets it go on: it receives the
// stage on the returned channel and answers on the other.
func stopWrites(c *Coordinator, node string) (stages <-chan string, proceed chan<- struct{}) {
	st, go_ := make(chan string), make(chan struct{})
	c.syncs.syncLimits.writeHook = func(n, stage string) {
		if n == node && stage != "slice" { // each transaction of a big write: not stopped
			st <- stage
			<-go_
		}
	}
	return st, go_
}

// TestSyncWriteKeepsOwnAddAndRefusesDelete: a synced node syncs again
// from a snapshot without blob R, and adds R while its sync is being
// written, before the sync's replace lands (docs/design.md §10.5). The
// replace drops R from the store; until R is written again, a delete of R
// by another node must still be refused, naming the node; afterwards R
// is stored. The node stays synced throughout, sessions and other
// nodes' requests are served during the write, another sync of the node
// is refused as busy (nothing changes), and a retry of the done waits
// for the write and is answered as the done.
func TestSyncWriteKeepsOwnAddAndRefusesDelete(t *testing.T) {
	c := newTestCoordinator(t)
	ctx := context.Background()
	const a, r = "sha256:kept", "sha256:added-during-write"
	for _, n := range []string{"n1", "n2"} {
		session(t, c, n)
	}
	syncRefs(t, c, "n1", "s0", true, a)
	syncRefs(t, c, "n2", "s0", true)
	require.True(t, synced(t, c, "n1"))
	stages, proceed := stopWrites(c, "n1")

	session(t, c, "n1")
	written := make(chan error, 1)
	go func() {
		_, err := c.SyncRefs(ctx, "n1", api.SyncRequest{SyncID: "s1", ResourceIDs: []string{a}, Done: true, Echo: echoOf(c, "n1")})
		written <- err
	}()
	require.Equal(t, "replace", <-stages)
	require.True(t, synced(t, c, "n1"), "a sync never makes its node unsynced")
	session(t, c, "n2") // sessions are served while the sync is written
	_, err := c.SyncRefs(ctx, "n1", api.SyncRequest{SyncID: "s2", ResourceIDs: []string{}})
	require.ErrorIs(t, err, api.ErrTooManyRequests, "another sync of the node waits for the write")
	_, err = c.AddRef(ctx, r, "n1")
	require.NoError(t, err)
	retried := make(chan api.SyncResponse, 1)
	go func() { // the node's request timed out: it sends its done again
		resp, err := c.SyncRefs(ctx, "n1", api.SyncRequest{SyncID: "s1", ResourceIDs: []string{a}, Done: true, Echo: echoOf(c, "n1")})
		if err != nil {
			t.Errorf("a retry of the done being written: %v", err)
		}
		retried <- resp
	}()
	proceed <- struct{}{}

	require.Equal(t, "replaced", <-stages)
	require.Empty(t, refsOf(t, c, r), "the replace, landed after the add, dropped it from the store")
	_, err = c.Lock(ctx, api.LockRequest{Type: api.OperationDelete, ResourceID: r, NodeID: "n2"})
	var inUse *api.InUseError
	require.ErrorAs(t, err, &inUse, "a delete of what the node added during its sync's write is refused")
	require.Equal(t, []string{"n1"}, inUse.Refs.Nodes)
	require.True(t, synced(t, c, "n1"))
	proceed <- struct{}{}

	require.NoError(t, <-written)
	require.Equal(t, api.SyncResponse{Received: 1, Synced: true}, <-retried, "the retry is answered as the done was")
	require.True(t, synced(t, c, "n1"))
	require.Equal(t, []string{"n1"}, refsOf(t, c, r), "the node's add is written again after the replace")
	require.Equal(t, []string{"n1"}, refsOf(t, c, a))
	_, err = c.Lock(ctx, api.LockRequest{Type: api.OperationDelete, ResourceID: r, NodeID: "n2"})
	require.ErrorAs(t, err, &inUse)
}

// TestSyncWriteOfUnsyncedNodeRefusesDelete: a new member's first sync,
// which references R, races a delete of R at each stage of its write:
// before the replace the member is unsynced, after it R is referenced;
// the member is synced only once its references are stored.
func TestSyncWriteOfUnsyncedNodeRefusesDelete(t *testing.T) {
	c := newTestCoordinator(t)
	ctx := context.Background()
	const r = "sha256:first-sync"
	session(t, c, "n2")
	syncRefs(t, c, "n2", "s0", true)
	require.False(t, session(t, c, "n1").Synced)
	stages, proceed := stopWrites(c, "n1")
	written := make(chan error, 1)
	go func() {
		_, err := c.SyncRefs(ctx, "n1", api.SyncRequest{SyncID: "s1", ResourceIDs: []string{r}, Done: true, Echo: echoOf(c, "n1")})
		written <- err
	}()
	for _, stage := range []struct {
		name    string
		refusal error
	}{{"replace", api.ErrUnsynced}, {"replaced", api.ErrInUse}} {
		require.Equal(t, stage.name, <-stages)
		require.False(t, synced(t, c, "n1"), "%s: synced before its write is done", stage.name)
		_, err := c.Lock(ctx, api.LockRequest{Type: api.OperationDelete, ResourceID: r, NodeID: "n2"})
		require.ErrorIs(t, err, stage.refusal, stage.name)
		proceed <- struct{}{}
	}
	require.NoError(t, <-written)
	require.True(t, synced(t, c, "n1"))
	_, err := c.Lock(ctx, api.LockRequest{Type: api.OperationDelete, ResourceID: r, NodeID: "n2"})
	require.ErrorIs(t, err, api.ErrInUse)
}

// TestSyncWriteAfterSessionEnded: a node whose session ends while its
// sync is written is not made synced by it (its references are written
// all the same); its next session syncs again.
func TestSyncWriteAfterSessionEnded(t *testing.T) {
	c := newTestCoordinator(t)
	ctx := context.Background()
	a, err := c.Session(ctx, api.SessionRequest{NodeID: "n1", InstanceID: "i1"})
	require.NoError(t, err)
	stages, proceed := stopWrites(c, "n1")
	written := make(chan error, 1)
	go func() {
		_, err := c.SyncRefs(ctx, "n1", api.SyncRequest{SyncID: "s1", ResourceIDs: []string{blob}, Done: true, Echo: echo(a, 0)})
		written <- err
	}()
	require.Equal(t, "replace", <-stages)
	ended, err := c.EndSession(ctx, api.EndSessionRequest{NodeID: "n1", InstanceID: "i1"})
	require.NoError(t, err)
	require.True(t, ended.Ended)
	proceed <- struct{}{}
	require.Equal(t, "replaced", <-stages)
	proceed <- struct{}{}
	require.ErrorIs(t, <-written, api.ErrNoSession)
	require.False(t, synced(t, c, "n1"))

	c.syncs.syncLimits.writeHook = nil
	a, err = c.Session(ctx, api.SessionRequest{NodeID: "n1", InstanceID: "i1"})
	require.NoError(t, err)
	require.False(t, a.Synced)
	_, err = c.SyncRefs(ctx, "n1", api.SyncRequest{SyncID: "s2", ResourceIDs: []string{blob}, Done: true, Echo: echo(a, 0)})
	require.NoError(t, err)
	require.True(t, synced(t, c, "n1"))
}
