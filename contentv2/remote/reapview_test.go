package remote_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"
	"github.com/stretchr/testify/require"

	"github.com/sharedcontent/sharedcontent/contentv2"
	"github.com/sharedcontent/sharedcontent/lockserver"
	"github.com/sharedcontent/sharedcontent/lockserver/lockservertest"
)

// TestReaperWithEmptyViewDropsNoOtherRef: a node whose shared root is not
// mounted sees an empty directory. As the designated reaper it found
// every other node's referenced blob "missing" and, once the grace had
// passed, dropped those references (`dangling=10`), so the blobs were
// reclaimed after the root came back. Now a reaper drops no other node's
// reference, whatever its view, against a real coordinator over HTTP;
// and its own view being that empty, it drops none of its own either.
func TestReaperWithEmptyViewDropsNoOtherRef(t *testing.T) {
	cfg := lockserver.DefaultConfig()
	cfg.SessionTTL, cfg.ReapGrace = sessionTTL, 0
	cfg.Reapers = []string{"node-1"}
	coord := lockservertest.Start(t, lockservertest.WithConfig(cfg))
	ctx := context.Background()

	// node-2 uses three blobs of the real root; node-1's view is empty.
	var blobs []digest.Digest
	for i := range 3 {
		blobs = append(blobs, blobDigest(100+i))
	}
	join(t, node(t, coord, "node-2"), "i2", blobs...)
	// The view carries the cluster's identity (a brand-new node refuses
	// a root without one once the cluster has a root, docs/design.md
	// §8.19), but none of its blobs: the reaper's own rule is what is
	// tested here.
	view := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(view, contentv2.MetaDir), 0o755))
	cf, err := json.Marshal(contentv2.ClusterFile{ClusterID: coord.Core().Cluster().ClusterID, CreatedAt: time.Now().UTC(), CreatedBy: "node-2"})
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(view, contentv2.MetaDir, "cluster.json"), cf, 0o644))
	s, err := contentv2.NewStore(view, "node-1", node(t, coord, "node-1"), contentv2.WithStateDir(t.TempDir()),
		contentv2.WithSessionTTL(sessionTTL), contentv2.WithReaper(0, 0))
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	require.Eventually(t, func() bool {
		ns, err := coord.Core().Nodes(ctx)
		require.NoError(t, err)
		for _, n := range ns.Nodes {
			if n.NodeID == "node-1" {
				return n.Synced
			}
		}
		return false
	}, 10*time.Second, 5*time.Millisecond, "node-1 syncs: deletes are no longer refused as unsynced")

	// Passes a grace (0) apart: every reference has been seen missing
	// long enough.
	for range 3 {
		rep, err := s.Reap(ctx)
		require.NoError(t, err)
		require.True(t, rep.Ran, "node-1 is the designated reaper")
		require.Len(t, rep.Plan.Dangling, len(blobs), "the reaper sees node-2's references dangling in its view")
		require.Zero(t, rep.Dangling)
		require.Empty(t, rep.Done.Dangling)
	}
	for _, d := range blobs {
		refs, err := coord.Core().Refs(ctx, d.String())
		require.NoError(t, err)
		require.Equal(t, []string{"node-2"}, refs.Nodes, "node-2's reference to %s stays", d)
	}
}
