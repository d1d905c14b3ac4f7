package remote_test

import (
	"context"
	"testing"

	"github.com/opencontainers/go-digest"
	"github.com/stretchr/testify/require"

	"github.com/sharedcontent/sharedcontent/contentv2"
	"github.com/sharedcontent/sharedcontent/contentv2/remote"
	"github.com/sharedcontent/sharedcontent/lockclient"
	"github.com/sharedcontent/sharedcontent/lockserver"
	"github.com/sharedcontent/sharedcontent/lockserver/api"
	"github.com/sharedcontent/sharedcontent/lockserver/lockservertest"
)

// TestFailoverLooksLikeRestart: a node given both replicas' URLs joins
// the leader; the leadership moves; its next renewal reaches the new
// leader, whose answer (another epoch, a new member, unsynced) is the
// answer of a coordinator that restarted, and its sync there completes
// (docs/design.md §7, §8.3). The replicas share the cluster ID, as
// replicas on one etcd do; their databases are their own here.
func TestFailoverLooksLikeRestart(t *testing.T) {
	ctx := context.Background()
	cfg := lockserver.DefaultConfig()
	cfg.SessionTTL = sessionTTL
	rs := lockservertest.StartReplicas(t, 2, lockservertest.WithConfig(cfg))
	cluster := rs[0].Core().Cluster()
	_, err := rs[1].Core().Adopt(ctx, api.AdoptRequest{ClusterID: cluster.ClusterID, Force: true})
	require.NoError(t, err)

	lc, err := lockclient.New(rs[1].URL()+","+rs[0].URL(), lockclient.WithNodeID("node-1"))
	require.NoError(t, err)
	t.Cleanup(func() { lc.Close() })
	c := remote.New(lc)
	first, err := c.Session(ctx, contentv2.SessionRequest{ClusterID: cluster.ClusterID, InstanceID: "i1"})
	require.NoError(t, err)
	require.Equal(t, cluster.Epoch, first.Epoch, "the leader answered")
	require.NoError(t, c.SyncRefs(ctx, contentv2.SyncRequest{Generation: "g1",
		Snapshot: func() ([]digest.Digest, error) { return []digest.Digest{blobDigest(1)}, nil },
		Echo:     func() *contentv2.Echo { return &contentv2.Echo{Epoch: first.Epoch, Stamp: first.Stamp} }}))

	lockservertest.SetLeader(rs, 1)
	next, err := c.Session(ctx, contentv2.SessionRequest{ClusterID: cluster.ClusterID, InstanceID: "i1",
		Echo: &contentv2.Echo{Epoch: first.Epoch, Stamp: first.Stamp}})
	require.NoError(t, err)
	require.Equal(t, cluster.ClusterID, next.ClusterID)
	require.Equal(t, rs[1].Core().Cluster().Epoch, next.Epoch, "the new leader answered")
	require.NotEqual(t, first.Epoch, next.Epoch, "another epoch: the node must sync again")
	require.False(t, next.Synced)
	require.NoError(t, c.SyncRefs(ctx, contentv2.SyncRequest{Generation: "g1",
		Snapshot: func() ([]digest.Digest, error) { return []digest.Digest{blobDigest(1)}, nil },
		Echo:     func() *contentv2.Echo { return &contentv2.Echo{Epoch: next.Epoch, Stamp: next.Stamp} }}))
	refs, err := rs[1].Core().Refs(ctx, blobDigest(1).String())
	require.NoError(t, err)
	require.Equal(t, []string{"node-1"}, refs.Nodes)
	again, err := c.Session(ctx, contentv2.SessionRequest{ClusterID: cluster.ClusterID, InstanceID: "i1",
		Echo: &contentv2.Echo{Epoch: next.Epoch, Stamp: next.Stamp}})
	require.NoError(t, err)
	require.True(t, again.Synced, "synced with the new leader")
}
