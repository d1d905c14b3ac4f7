package coordinatortest

import (
	"testing"

	"github.com/opencontainers/go-digest"
	"github.com/stretchr/testify/require"

	"github.com/sharedcontent/sharedcontent/contentv2"
	"github.com/sharedcontent/sharedcontent/lockserver/api"
)

// testSessionOpen: a new node's first session names the cluster and is a
// new member, unsynced; once it has synced, its renewal says synced, and
// a session opened again (a restart of the same instance) is unsynced
// again and no new member.
func testSessionOpen(t *testing.T, c Cluster) {
	n := c.Node(t, "node-1")
	info := open(t, n, "instance-1")
	require.NotEmpty(t, info.ClusterID)
	require.NotZero(t, info.Epoch)
	require.Positive(t, info.TTL)
	require.True(t, info.NewMember, "the coordinator had no record of node-1")
	require.False(t, info.Synced, "an opened session starts unsynced")

	require.NoError(t, sync(t.Context(), n, info, "gen-1"))
	next := renew(t, n, "instance-1", info)
	require.True(t, next.Synced, "the renewal after a sync")
	require.False(t, next.NewMember)
	require.Equal(t, info.ClusterID, next.ClusterID)

	again := open(t, n, "instance-1")
	require.False(t, again.Synced, "a session opened anew asks for the journal")
	require.False(t, again.NewMember)
}

// testSessionRefusals: another instance under a live node ID is
// ErrDuplicateNode, a session for another cluster ErrWrongCluster;
// EndSession ends only its own instance's session, after which another
// instance may open one.
func testSessionRefusals(t *testing.T, c Cluster) {
	ctx := t.Context()
	n := c.Node(t, "node-1")
	info := join(t, n, "instance-1")

	_, err := n.Session(ctx, contentv2.SessionRequest{InstanceID: "instance-2"})
	require.ErrorIs(t, err, api.ErrDuplicateNode, "another instance while the session is live")
	_, err = c.Node(t, "node-2").Session(ctx, contentv2.SessionRequest{ClusterID: info.ClusterID + "-other", InstanceID: "x"})
	require.ErrorIs(t, err, api.ErrWrongCluster)

	ended, err := n.EndSession(ctx, "instance-2")
	require.NoError(t, err)
	require.False(t, ended, "not that instance's session")
	ended, err = n.EndSession(ctx, "instance-1")
	require.NoError(t, err)
	require.True(t, ended)
	ended, err = n.EndSession(ctx, "instance-1")
	require.NoError(t, err)
	require.False(t, ended, "ended already")

	info2, err := n.Session(ctx, contentv2.SessionRequest{ClusterID: info.ClusterID, InstanceID: "instance-2"})
	require.NoError(t, err, "the ended session no longer holds the node ID")
	require.False(t, info2.Synced)
}

// testSyncReplaces: a sync replaces the node's references with its
// journal, and touches no other node's.
func testSyncReplaces(t *testing.T, c Cluster) {
	n1, n2 := c.Node(t, "node-1"), c.Node(t, "node-2")
	info := join(t, n1, "i1", blob(1), blob(2))
	join(t, n2, "i2", blob(2))
	require.Equal(t, map[string][]string{
		blob(1).String(): {"node-1"},
		blob(2).String(): {"node-1", "node-2"},
	}, refs(t, n1))

	require.NoError(t, sync(t.Context(), n1, info, "gen-i1", blob(3)))
	require.Equal(t, map[string][]string{
		blob(2).String(): {"node-2"},
		blob(3).String(): {"node-1"},
	}, refs(t, n2))
}

// testSyncWithoutEcho: a sync whose last chunk may no longer be sent
// (Echo returns nil) is ErrLate, and the coordinator records none of it.
func testSyncWithoutEcho(t *testing.T, c Cluster) {
	n := c.Node(t, "node-1")
	open(t, n, "instance-1")
	err := n.SyncRefs(t.Context(), contentv2.SyncRequest{Generation: "gen-1",
		Snapshot: func() ([]digest.Digest, error) { return []digest.Digest{blob(1)}, nil },
		Echo:     func() *contentv2.Echo { return nil }})
	require.ErrorIs(t, err, api.ErrLate)
	require.Empty(t, refs(t, n))
}

// Restarter is a Cluster whose coordinator can restart: sessions and
// their syncs are lost, members and references kept.
type Restarter interface {
	Restart(t *testing.T)
}

// testRestart: after a restart the coordinator answers a renewal with a new
// epoch and asks for the journal again; references stay, and deletes wait
// until every member has synced anew (docs/design.md §8.3).
func testRestart(t *testing.T, c Cluster) {
	r, ok := c.(Restarter)
	if !ok {
		t.Skip("the cluster cannot restart")
	}
	ctx := t.Context()
	n1, n2 := c.Node(t, "node-1"), c.Node(t, "node-2")
	info1 := join(t, n1, "i1", blob(1))
	info2 := join(t, n2, "i2")

	r.Restart(t)
	next := renew(t, n1, "i1", info1)
	require.Greater(t, next.Epoch, info1.Epoch, "a restart moves the epoch on")
	require.False(t, next.Synced, "and asks for the journal again")
	require.Equal(t, map[string][]string{blob(1).String(): {"node-1"}}, refs(t, n1), "references survive")
	require.NoError(t, sync(ctx, n1, next, "gen-i1", blob(1)))
	_, err := n1.Lock(ctx, del(blob(2)))
	require.ErrorIs(t, err, api.ErrUnsynced, "node-2 has not synced since the restart")

	next2 := renew(t, n2, "i2", info2)
	require.False(t, next2.Synced)
	require.NoError(t, sync(ctx, n2, next2, "gen-i2"))
	require.NoError(t, lock(t, n1, del(blob(2))).Unlock(ctx, false, nil), "every member synced again")
}
