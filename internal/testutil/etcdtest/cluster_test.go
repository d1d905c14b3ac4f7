package etcdtest_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sharedcontent/sharedcontent/internal/testutil/etcdtest"
)

// TestCluster: the three members form one cluster, which keeps its quorum
// with one member killed or its leader stopped, and a restarted member
// catches up.
func TestCluster(t *testing.T) {
	c := etcdtest.Start(t, etcdtest.Options{})
	require.Len(t, c.Endpoints(), 3)
	ctx := t.Context()
	_, err := c.ClientOf(t, c.Endpoint(0)).Put(ctx, "k", "v1")
	require.NoError(t, err)
	for i := range 3 {
		resp, err := c.ClientOf(t, c.Endpoint(i)).Get(ctx, "k")
		require.NoError(t, err)
		require.Len(t, resp.Kvs, 1, "member %d", i)
		require.Equal(t, "v1", string(resp.Kvs[0].Value))
	}
	c.Kill(2)
	// A write sent while the killed member was the leader may be lost
	// with it (etcd answers "request timed out"): wait for a leader.
	c.WaitHealthy(t)
	_, err = c.ClientOf(t, c.Endpoint(1)).Put(ctx, "k", "v2")
	require.NoError(t, err, "two of three members are a quorum")
	c.Restart(t, 2)
	c.WaitHealthy(t)
	resp, err := c.ClientOf(t, c.Endpoint(2)).Get(ctx, "k")
	require.NoError(t, err)
	require.Equal(t, "v2", string(resp.Kvs[0].Value), "the restarted member caught up")

	// The leader stopped gracefully hands over; it comes back as well.
	leader := c.Leader(t)
	c.Stop(leader)
	c.WaitHealthy(t)
	other := (leader + 1) % 3
	require.NotEqual(t, leader, c.Leader(t))
	_, err = c.ClientOf(t, c.Endpoint(other)).Put(ctx, "k", "v3")
	require.NoError(t, err)
	c.Restart(t, leader)
	c.WaitHealthy(t)
	resp, err = c.ClientOf(t, c.Endpoint(leader)).Get(ctx, "k")
	require.NoError(t, err)
	require.Equal(t, "v3", string(resp.Kvs[0].Value))
}
