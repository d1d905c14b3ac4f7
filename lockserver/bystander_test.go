package lockserver

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sharedcontent/sharedcontent/lockserver/api"
)

// bystander reports whether GET /nodes shows node as a bystander.
func bystander(t *testing.T, c *Coordinator, node string) bool {
	t.Helper()
	nodes, err := c.Nodes(context.Background())
	require.NoError(t, err)
	for _, n := range nodes.Nodes {
		if n.NodeID == node {
			return n.Bystander
		}
	}
	t.Fatalf("%s is no member", node)
	return false
}

// TestBystanderStopsHoldingDeletes (docs/design.md §10.3): a member that opened a
// session without naming its cluster or authenticating as itself and never
// synced (a one-off session) holds deletes up only until it has been absent
// for BystanderAfter of the coordinator's uptime; its references still
// count. A member that named the cluster, authenticated, or synced is
// waited for as before.
func TestBystanderStopsHoldingDeletes(t *testing.T) {
	const ttl, after = time.Second, time.Minute
	coord := newTestCoordinator(t, func(c *Config) { c.SessionTTL, c.BystanderAfter = ttl, after })
	clk := useFakeClock(coord)
	ctx := context.Background()
	const other = "sha256:bbbb"
	for _, req := range []api.SessionRequest{
		{NodeID: "oneoff"},
		{NodeID: "oneoff-ref"},
		{NodeID: "named", ClusterID: coord.Cluster().ClusterID},
		{NodeID: "identified", Identified: true},
	} {
		_, err := coord.Session(ctx, req)
		require.NoError(t, err)
	}
	_, err := coord.AddRef(ctx, other, "oneoff-ref")
	require.NoError(t, err)
	require.True(t, bystander(t, coord, "oneoff"))
	require.False(t, bystander(t, coord, "named"))
	require.False(t, bystander(t, coord, "identified"))
	syncedNode(t, coord, "was-oneoff") // a sync ends being a bystander
	require.False(t, bystander(t, coord, "was-oneoff"))

	deleteBy := func(node, resource string) error {
		_, err := coord.Lock(ctx, api.LockRequest{Type: api.OperationDelete, ResourceID: resource, NodeID: node})
		return err
	}
	// Absent for just under BystanderAfter: every delete waits for all.
	clk.at(ttl + after - time.Millisecond)
	syncedNode(t, coord, "deleter")
	syncedNode(t, coord, "was-oneoff")
	var ue *api.UnsyncedError
	require.ErrorAs(t, deleteBy("deleter", blob), &ue)
	require.Equal(t, []string{"identified", "named", "oneoff", "oneoff-ref"}, ue.Nodes)

	// Past it: the bystanders are let go, the others still waited for.
	clk.at(ttl + after + time.Millisecond)
	syncedNode(t, coord, "deleter")
	syncedNode(t, coord, "was-oneoff")
	require.ErrorAs(t, deleteBy("deleter", blob), &ue)
	require.Equal(t, []string{"identified", "named"}, ue.Nodes, "only the bystanders are let go")
	for _, node := range []string{"identified", "named"} {
		syncedNode(t, coord, node)
	}
	resp := mustLock(t, coord, api.OperationDelete, "deleter")
	require.True(t, resp.Acquired, "no member but the bystanders was unsynced")
	unlock(t, coord, api.OperationDelete, resp.LeaseID, true)
	require.ErrorIs(t, deleteBy("deleter", other), api.ErrInUse, "a bystander's reference still counts")
	require.Equal(t, []string{"oneoff-ref"}, refsOf(t, coord, other))

	// Back, naming its cluster: no longer a bystander, and waited for.
	_, err = coord.Session(ctx, api.SessionRequest{NodeID: "oneoff", ClusterID: coord.Cluster().ClusterID})
	require.NoError(t, err)
	require.False(t, bystander(t, coord, "oneoff"))
	require.ErrorAs(t, deleteBy("deleter", "sha256:cccc"), &ue)
	require.Equal(t, []string{"oneoff"}, ue.Nodes)
	members, err := coord.refs.Storage().ListMembers(ctx)
	require.NoError(t, err)
	for _, m := range members {
		require.Equal(t, m.ID == "oneoff-ref", m.Bystander, "persisted: %s", m.ID)
	}
}

// TestBystanderRuleOff: BystanderAfter 0 waits for every member forever.
func TestBystanderRuleOff(t *testing.T) {
	coord := newTestCoordinator(t, func(c *Config) { c.SessionTTL, c.BystanderAfter = time.Second, 0 })
	clk := useFakeClock(coord)
	_, err := coord.Session(context.Background(), api.SessionRequest{NodeID: "oneoff"})
	require.NoError(t, err)
	clk.at(1000 * time.Hour)
	syncedNode(t, coord, "deleter")
	var ue *api.UnsyncedError
	_, err = coord.Lock(context.Background(), lockReq(api.OperationDelete, "deleter"))
	require.ErrorAs(t, err, &ue)
	require.Equal(t, []string{"oneoff"}, ue.Nodes)
}
