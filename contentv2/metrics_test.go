package contentv2_test

import (
	"bytes"
	"context"
	"testing"

	"github.com/containerd/containerd/v2/core/content"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/sharedcontent/sharedcontent/contentv2"
	"github.com/sharedcontent/sharedcontent/contentv2/remote"
	"github.com/sharedcontent/sharedcontent/lockclient"
	"github.com/sharedcontent/sharedcontent/lockserver/lockservertest"
)

// TestSharedBytesCounted: sharedcontent_store_shared_bytes_total counts
// the bytes of a blob a node started using that another node downloaded,
// once; not the blobs a node committed itself, and not again when the
// plugin restarts and containerd asks about a blob it used before.
func TestSharedBytesCounted(t *testing.T) {
	coord := lockservertest.Start(t)
	root := t.TempDir()
	state2 := t.TempDir()
	node := func(id, state string) (contentv2.Store, *prometheus.Registry) {
		c, err := lockclient.New(coord.URL(), lockclient.WithNodeID(id))
		require.NoError(t, err)
		t.Cleanup(func() { c.Close() })
		reg := prometheus.NewRegistry()
		cs, err := contentv2.NewStore(root, id, remote.New(c), contentv2.WithStateDir(state), contentv2.WithRegisterer(reg))
		require.NoError(t, err)
		t.Cleanup(func() { cs.Close() })
		return cs, reg
	}
	shared := func(reg *prometheus.Registry) float64 {
		mfs, err := reg.Gather()
		require.NoError(t, err)
		for _, mf := range mfs {
			if mf.GetName() == "sharedcontent_store_shared_bytes_total" {
				return mf.GetMetric()[0].GetCounter().GetValue()
			}
		}
		t.Fatal("sharedcontent_store_shared_bytes_total not registered")
		return 0
	}
	ctx := context.Background()
	n1, reg1 := node("node-1", t.TempDir())
	n2, reg2 := node("node-2", state2)
	data, desc := blob("shared bytes ")
	require.NoError(t, content.WriteBlob(ctx, n1, "layer-"+desc.Digest.String(), bytes.NewReader(data), desc))
	_, err := n1.Info(ctx, desc.Digest)
	require.NoError(t, err)
	require.Zero(t, shared(reg1), "node 1 downloaded it")

	_, err = n2.Info(ctx, desc.Digest)
	require.NoError(t, err)
	_, err = n2.Info(ctx, desc.Digest)
	require.NoError(t, err)
	require.Equal(t, float64(desc.Size), shared(reg2), "node 2 uses it without downloading, counted once")

	require.NoError(t, n2.Close()) // the plugin restarts with the same journal
	n2, reg2 = node("node-2", state2)
	_, err = n2.Info(ctx, desc.Digest)
	require.NoError(t, err)
	require.Zero(t, shared(reg2), "a blob it used before its restart is not new")
}
