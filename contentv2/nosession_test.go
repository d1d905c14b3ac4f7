package contentv2_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/containerd/containerd/v2/core/content"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/sharedcontent/sharedcontent/contentv2"
	"github.com/sharedcontent/sharedcontent/contentv2/remote"
	"github.com/sharedcontent/sharedcontent/lockclient"
	"github.com/sharedcontent/sharedcontent/lockserver"
	"github.com/sharedcontent/sharedcontent/lockserver/lockservertest"
)

// realStore is nodeID's store on root, coordinated at url, returned once
// synced, with its metrics. Its coordination calls give up after 300 ms.
func realStore(t *testing.T, root, nodeID, url string, opts ...lockclient.Option) (contentv2.Store, *prometheus.Registry) {
	t.Helper()
	client, err := lockclient.New(url, append([]lockclient.Option{lockclient.WithNodeID(nodeID)}, opts...)...)
	require.NoError(t, err)
	t.Cleanup(func() { client.Close() })
	reg := prometheus.NewRegistry()
	cs, err := contentv2.NewStore(root, nodeID, remote.New(client), contentv2.WithStateDir(t.TempDir()),
		contentv2.WithCoordinationTimeout(300*time.Millisecond), contentv2.WithRegisterer(reg))
	require.NoError(t, err)
	t.Cleanup(func() { cs.Close() })
	awaitSynced(t, reg)
	return cs, reg
}

// counterOf returns the counter name's series whose label is value.
func counterOf(t *testing.T, reg *prometheus.Registry, name, label, value string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == label && lp.GetValue() == value {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

// commit pulls data (desc) into cs as containerd's fetch does: a writer
// named after the digest, written whole, committed.
func commit(ctx context.Context, t *testing.T, cs content.Store, s string) ocispec.Descriptor {
	t.Helper()
	data, desc := blob(s)
	w, err := cs.Writer(ctx, content.WithRef("layer-"+desc.Digest.String()), content.WithDescriptor(desc))
	require.NoError(t, err)
	_, err = w.Write(data)
	require.NoError(t, err)
	require.NoError(t, w.Commit(ctx, desc.Size, desc.Digest))
	require.NoError(t, w.Close())
	return desc
}

func refNodes(ctx context.Context, t *testing.T, c *lockservertest.Server, dgst digest.Digest) []string {
	t.Helper()
	rc, err := c.Core().Refs(ctx, dgst.String())
	require.NoError(t, err)
	return rc.Nodes
}

// TestPullAfterSessionLapseIsReferenced: the coordinator restarts, so it
// holds no live session of the node until the node's next round (a
// third of the session TTL away). Within one session TTL of its start the
// coordinator admits the references of a recorded member that has had no
// session there yet (the start grace, docs/design.md §10.7: older nodes
// do not know the no_session refusal), so a pull meanwhile is referenced
// at once, without a refusal, with the real store and coordinator.
func TestPullAfterSessionLapseIsReferenced(t *testing.T) {
	ctx := context.Background()
	cfg := lockserver.DefaultConfig()
	cfg.SessionTTL = time.Minute // rounds 20 s apart: none falls in the test
	cfg.LeaseTTL = 30 * time.Second
	coord := lockservertest.Start(t, lockservertest.WithConfig(cfg))
	root := t.TempDir()
	cs, reg := realStore(t, root, "node-1", coord.URL())
	require.Equal(t, []string{"node-1"}, refNodes(ctx, t, coord, commit(ctx, t, cs, "before ").Digest))

	coord.Restart()
	nodes, err := coord.Core().Nodes(ctx)
	require.NoError(t, err)
	require.Len(t, nodes.Nodes, 1)
	require.False(t, nodes.Nodes[0].Live, "the restarted coordinator holds no live session of node-1")

	desc := commit(ctx, t, cs, "after the lapse ")
	require.Equal(t, []string{"node-1"}, refNodes(ctx, t, coord, desc.Digest), "the pull ends with the blob referenced")
	require.Zero(t, counterOf(t, reg, "sharedcontent_store_session_refusals_total", "reason", "no_session"),
		"the start grace admitted the reference: no refusal")
	rc, err := cs.ReaderAt(ctx, desc)
	require.NoError(t, err, "the blob reads back")
	require.NoError(t, rc.Close())
}

// TestDeleteRefusedByRootDropsOwnRef: a delete that the shared root
// refuses (its identity gone: the rootwatch probe right before the
// delete turns the node unready) still drops the node's own reference,
// and leaves the file: containerd calls Delete only for a blob its
// metadata no longer holds, and retries a failed one only at a later
// content collection (one that removes other content), never on an idle
// node. Once the root is back, another node's delete removes the blob.
//
// Before, the refused delete kept the reference: the blob stayed
// referenced by a node that no longer used it, and nobody could delete
// it.
func TestDeleteRefusedByRootDropsOwnRef(t *testing.T) {
	ctx := context.Background()
	coord := lockservertest.Start(t)
	root := t.TempDir()
	n1, reg := realStore(t, root, "node-1", coord.URL())
	n2, _ := realStore(t, root, "node-2", coord.URL())
	dgst := commit(ctx, t, n1, "unready delete ").Digest
	require.Equal(t, []string{"node-1"}, refNodes(ctx, t, coord, dgst))

	cluster := filepath.Join(root, ".sharedcontent", "cluster.json")
	require.NoError(t, os.Rename(cluster, cluster+".away"))
	err := n1.Delete(ctx, dgst)
	require.ErrorIs(t, err, contentv2.ErrRootUnverified, "the delete is refused, so containerd's sweep stops")
	require.Empty(t, refNodes(ctx, t, coord, dgst), "node-1's reference is dropped all the same")
	require.FileExists(t, blobFile(root, dgst), "the file is left alone")
	require.Equal(t, 1.0, counterOf(t, reg, "sharedcontent_store_deletes_total", "result", "ref_dropped"))

	require.NoError(t, os.Rename(cluster+".away", cluster))
	require.Eventually(t, func() bool { return n1.Ready() == nil }, 20*time.Second, 10*time.Millisecond,
		"node-1 resumes once its root is back")
	require.Empty(t, refNodes(ctx, t, coord, dgst), "still unreferenced after the recovery")
	require.NoError(t, n2.Delete(ctx, dgst))
	require.NoFileExists(t, blobFile(root, dgst), "reclaimed: nobody references it")
}
