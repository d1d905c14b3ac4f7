package lockserver

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sharedcontent/sharedcontent/lockserver/api"
)

// openSynced opens node's session as instance and syncs it (with ids).
func openSynced(t *testing.T, c *Coordinator, node, instance string, ids ...string) {
	t.Helper()
	ctx := context.Background()
	a, err := c.Session(ctx, api.SessionRequest{NodeID: node, InstanceID: instance})
	require.NoError(t, err)
	_, err = c.SyncRefs(ctx, node, api.SyncRequest{SyncID: "s-" + node + instance, ResourceIDs: ids, Done: true, Echo: echo(a, 0)})
	require.NoError(t, err)
	require.True(t, synced(t, c, node))
}

func live(t *testing.T, c *Coordinator, node string) bool {
	t.Helper()
	nodes, err := c.Nodes(context.Background())
	require.NoError(t, err)
	for _, n := range nodes.Nodes {
		if n.NodeID == node {
			return n.Live
		}
	}
	return false
}

// TestEndSessionByOwner: a daemon shutting down cleanly ends its own
// session. Its node is then not live and not synced (a delete waits for
// it, naming it), a sync in progress is dropped, and a new instance of
// the node opens its session at once, with no time passing, instead of
// being refused as a duplicate until the old session lapses.
func TestEndSessionByOwner(t *testing.T) {
	coord := newTestCoordinator(t, func(c *Config) { c.SessionTTL = 3 * time.Second })
	clock := useFakeClock(coord)
	ctx := context.Background()
	clock.at(time.Second)
	openSynced(t, coord, "host", "i1", "sha256:kept")
	openSynced(t, coord, "n2", "j1")
	_, err := coord.SyncRefs(ctx, "host", api.SyncRequest{SyncID: "in-progress", ResourceIDs: []string{}})
	require.NoError(t, err)

	resp, err := coord.EndSession(ctx, api.EndSessionRequest{NodeID: "host", InstanceID: "i1"})
	require.NoError(t, err)
	require.True(t, resp.Ended)
	require.False(t, live(t, coord, "host"), "the session is over at once")
	require.False(t, synced(t, coord, "host"))
	coord.mmu.Lock()
	require.Nil(t, coord.members["host"].sync, "the sync in progress is dropped")
	coord.mmu.Unlock()
	_, err = coord.Lock(ctx, api.LockRequest{Type: api.OperationDelete, ResourceID: blob, NodeID: "n2"})
	var ue *api.UnsyncedError
	require.ErrorAs(t, err, &ue, "deletes wait for the node")
	require.Equal(t, []string{"host"}, ue.Nodes)
	require.Equal(t, []string{"host"}, refsOf(t, coord, "sha256:kept"), "its references stay")

	again, err := coord.EndSession(ctx, api.EndSessionRequest{NodeID: "host", InstanceID: "i1"})
	require.NoError(t, err, "ending twice is no error")
	require.False(t, again.Ended)
	require.Contains(t, again.Reason, "no live session")

	a, err := coord.Session(ctx, api.SessionRequest{NodeID: "host", InstanceID: "i2"})
	require.NoError(t, err, "a new instance opens at once: no duplicate_node")
	require.False(t, a.Synced, "and syncs before any delete")
	_, err = coord.SyncRefs(ctx, "host", api.SyncRequest{SyncID: "s-i2", ResourceIDs: []string{"sha256:kept"}, Done: true, Echo: echo(a, 0)})
	require.NoError(t, err)
	require.True(t, synced(t, coord, "host"))

	old, err := coord.EndSession(ctx, api.EndSessionRequest{NodeID: "host", InstanceID: "i1"})
	require.NoError(t, err)
	require.False(t, old.Ended, "the old instance cannot end the new one's session")
	require.True(t, live(t, coord, "host"))
	require.True(t, synced(t, coord, "host"))
}

// TestEndSessionByOthersChangesNothing: another instance of the node, an
// unknown node, or a node with no live session ends nothing, without an
// error (nothing to retry); a request without an instance ID is refused.
// The live instance keeps its session, synced, and a second instance is
// still refused as a duplicate.
func TestEndSessionByOthersChangesNothing(t *testing.T) {
	coord := newTestCoordinator(t, func(c *Config) { c.SessionTTL = 3 * time.Second })
	clock := useFakeClock(coord)
	ctx := context.Background()
	openSynced(t, coord, "host", "i1")
	openSynced(t, coord, "older", "") // a node without instance IDs
	clock.at(time.Second)

	for _, tc := range []struct {
		name, node, instance, reason string
	}{
		{"another instance", "host", "i2", "another instance"},
		{"an instance of an older node's session", "older", "i2", "another instance"},
		{"an unknown node", "nobody", "i1", "no live session"},
	} {
		resp, err := coord.EndSession(ctx, api.EndSessionRequest{NodeID: tc.node, InstanceID: tc.instance})
		require.NoError(t, err, tc.name)
		require.False(t, resp.Ended, tc.name)
		require.Contains(t, resp.Reason, tc.reason, tc.name)
	}
	_, err := coord.EndSession(ctx, api.EndSessionRequest{NodeID: "host"})
	require.ErrorIs(t, err, api.ErrInvalidArgument, "no instance ID")
	require.ErrorContains(t, err, "instance_id")

	for _, n := range []string{"host", "older"} {
		require.True(t, live(t, coord, n), n)
		require.True(t, synced(t, coord, n), n)
	}
	nodes, err := coord.Nodes(ctx)
	require.NoError(t, err)
	require.Len(t, nodes.Nodes, 2, "an unknown node's request makes no member")
	_, err = coord.Session(ctx, api.SessionRequest{NodeID: "host", InstanceID: "i2"})
	require.ErrorIs(t, err, api.ErrDuplicateNode, "the live instance's session still stands")

	clock.at(10 * time.Second) // every session lapsed
	resp, err := coord.EndSession(ctx, api.EndSessionRequest{NodeID: "host", InstanceID: "i1"})
	require.NoError(t, err)
	require.False(t, resp.Ended, "a lapsed session has nothing to end")
}
