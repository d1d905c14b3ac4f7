package lockserver

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/sharedcontent/sharedcontent/lockserver/api"
)

// TestClusterHasOneRoot (docs/design.md §8.19): the first nodes of a new
// cluster may claim an empty root; once the cluster has a root, a node
// asking to claim one (its root has no cluster file: the shared storage is
// not mounted there) is refused before it becomes a member, and a node
// naming another root of the cluster is refused too. The recorded root
// survives a coordinator restart; an adoption clears it, and its members
// stand for it until a node names the root again.
//
// Before: the coordinator knew nothing of the root, and a brand-new node
// on an unmounted root claimed its empty local directory and served it.
func TestClusterHasOneRoot(t *testing.T) {
	dir := t.TempDir()
	ts := startStored(t, dir)
	coord := ts.Coordinator
	ctx := context.Background()
	c := coord.Cluster().ClusterID
	r1 := &api.RootIdentity{CreatedAt: time.Date(2026, 12, 1, 21, 0, 0, 1, time.UTC), CreatedBy: "a"}
	r2 := &api.RootIdentity{CreatedAt: r1.CreatedAt.Add(time.Millisecond), CreatedBy: "b"}
	claim := func(node string) api.SessionRequest {
		return api.SessionRequest{NodeID: node, InstanceID: "i-" + node, Generation: "g-" + node, Unclaimed: true}
	}
	named := func(node string, root *api.RootIdentity) api.SessionRequest {
		return api.SessionRequest{NodeID: node, InstanceID: "i-" + node, Generation: "g-" + node, ClusterID: c, Root: root}
	}

	// Two first nodes race: both may claim.
	_, err := coord.Session(ctx, claim("a"))
	require.NoError(t, err)
	_, err = coord.Session(ctx, claim("b"))
	require.NoError(t, err, "two first nodes of a new cluster both may claim")
	_, err = coord.Session(ctx, named("a", r1))
	require.NoError(t, err)
	_, err = coord.Session(ctx, named("b", r2))
	require.ErrorIs(t, err, api.ErrRootClaimed, "a second root of the cluster")
	require.ErrorContains(t, err, r1.String())
	require.ErrorContains(t, err, r2.String())
	_, err = coord.Session(ctx, named("b", &api.RootIdentity{CreatedAt: r1.CreatedAt.In(time.FixedZone("x", 3600)), CreatedBy: "a"}))
	require.NoError(t, err, "the same root, however its time is written")

	requireRefused := func(why string) {
		t.Helper()
		_, err := coord.Session(ctx, claim("new"))
		require.ErrorIs(t, err, api.ErrRootClaimed, why)
		require.ErrorContains(t, err, "is the shared filesystem mounted", why)
		require.NotContains(t, memberIDs(t, coord), "new", "%s: a refused node is not made a member", why)
	}
	requireRefused("a root is recorded")
	req := claim("new")
	req.ClusterID = c
	_, err = coord.Session(ctx, req)
	require.ErrorIs(t, err, api.ErrRootClaimed, "with the cluster ID too")

	for _, bad := range []api.SessionRequest{
		{NodeID: "x", Unclaimed: true, ClusterID: c, Root: r1},
		{NodeID: "x", Root: r1},
		{NodeID: "x", ClusterID: c, Root: &api.RootIdentity{}},
	} {
		_, err := coord.Session(ctx, bad)
		require.ErrorIs(t, err, api.ErrInvalidArgument, "%+v", bad)
	}
	require.NotContains(t, memberIDs(t, coord), "x")

	ts.Stop()
	ts = startStored(t, dir)
	coord = ts.Coordinator
	requireRefused("after a coordinator restart")
	_, err = coord.Session(ctx, named("b", r2))
	require.ErrorIs(t, err, api.ErrRootClaimed, "after a coordinator restart")

	// An adoption clears the record; the adopted members stand for it.
	_, err = coord.Adopt(ctx, api.AdoptRequest{ClusterID: c, Nodes: []string{"a", "b", "n3"}})
	require.NoError(t, err)
	requireRefused("after an adoption (its members)")
	_, err = coord.Session(ctx, named("b", r2))
	require.NoError(t, err, "after an adoption the first node to name a root records it")
	_, err = coord.Session(ctx, named("a", r1))
	require.ErrorIs(t, err, api.ErrRootClaimed)
	require.Equal(t, 4.0, testutil.ToFloat64(coord.metrics.rootClaimed), "the refusals since the restart are counted")
}

// TestClusterRootFromSyncedMembers: a coordinator that recorded no root
// (an older one's database) has one when a member has synced: a node that
// asks to claim is refused.
func TestClusterRootFromSyncedMembers(t *testing.T) {
	c := newTestCoordinator(t)
	ctx := context.Background()
	claim := api.SessionRequest{NodeID: "new", InstanceID: "i-new", Generation: "g-new", Unclaimed: true}
	_, err := c.Session(ctx, claim)
	require.NoError(t, err, "no member has synced yet")
	a, err := c.Session(ctx, api.SessionRequest{NodeID: "old", InstanceID: "i-old", Generation: "g-old", ClusterID: c.Cluster().ClusterID})
	require.NoError(t, err)
	_, err = c.SyncRefs(ctx, "old", api.SyncRequest{SyncID: "s1", Generation: "g-old", ResourceIDs: []string{blob}, Done: true, Echo: echo(a, 0)})
	require.NoError(t, err)
	_, err = c.Session(ctx, claim)
	require.ErrorIs(t, err, api.ErrRootClaimed)
	require.ErrorContains(t, err, "member old has synced on it")
}
