package contentv2_test

import (
	"bytes"
	"context"
	"os"
	"sync"
	"testing"

	"github.com/containerd/containerd/v2/core/content"
	"github.com/containerd/containerd/v2/plugins/content/local"
	"github.com/containerd/errdefs"
	"github.com/opencontainers/go-digest"
	"github.com/stretchr/testify/require"

	"github.com/sharedcontent/sharedcontent/contentv2"
	"github.com/sharedcontent/sharedcontent/lockclient"
	"github.com/sharedcontent/sharedcontent/lockserver/lockservertest"
)

// staleView is a node's view of the shared directory through a
// filesystem's attribute cache: Info of a blob it has looked up once keeps
// answering for a while after another node deleted the file. GlusterFS
// with its default caches does this for about a second (docs/e2e.md).
type staleView struct {
	content.Store
	mu   sync.Mutex
	seen map[digest.Digest]content.Info
}

func (v *staleView) Info(ctx context.Context, dgst digest.Digest) (content.Info, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if info, ok := v.seen[dgst]; ok {
		return info, nil
	}
	info, err := v.Store.Info(ctx, dgst)
	if err == nil {
		v.seen[dgst] = info
	}
	return info, err
}

// TestStaleViewOfADeletedBlob: node 2 looked a blob up, then node 1
// deleted it; node 2's filesystem still shows it. Node 2's use of the blob
// must fail with NotFound (so containerd fetches it again) and record no
// reference, rather than hand containerd a blob that is gone. Once a node
// has committed the blob again, node 2 uses it.
func TestStaleViewOfADeletedBlob(t *testing.T) {
	coord := lockservertest.Start(t)
	root := t.TempDir()
	node := func(id string, opts ...contentv2.Option) contentv2.Store {
		c, err := lockclient.New(coord.URL(), lockclient.WithNodeID(id))
		require.NoError(t, err)
		t.Cleanup(func() { c.Close() })
		cs, err := contentv2.NewStore(root, id, contentv2.LockService(c), append(opts, contentv2.WithStateDir(t.TempDir()))...)
		require.NoError(t, err)
		t.Cleanup(func() { cs.Close() })
		return cs
	}
	n1 := node("node-1")
	local2, err := local.NewStore(root)
	require.NoError(t, err)
	view := &staleView{Store: local2, seen: map[digest.Digest]content.Info{}}
	n2 := node("node-2", contentv2.WithLocalStore(view))
	ctx := context.Background()

	data, desc := blob("stale view ")
	write := func(cs content.Store) error {
		return content.WriteBlob(ctx, cs, "layer-"+desc.Digest.String(), bytes.NewReader(data), desc)
	}
	require.NoError(t, write(n1))
	_, err = view.Info(ctx, desc.Digest) // node 2's filesystem looks it up
	require.NoError(t, err)
	require.NoError(t, n1.Delete(ctx, desc.Digest))
	require.NoFileExists(t, blobFile(root, desc.Digest), "node 1's delete removed the blob")

	_, err = n2.Info(ctx, desc.Digest)
	require.ErrorIs(t, err, errdefs.ErrNotFound, "a stale view of a deleted blob is not a blob")
	refs, err := coord.Locker().Refs(ctx, desc.Digest.String())
	require.NoError(t, err)
	require.Zero(t, refs.Count, "node 2's refused use is recorded nowhere")

	require.NoError(t, write(n1), "node 1 pulls the blob again")
	info, err := n2.Info(ctx, desc.Digest)
	require.NoError(t, err, "after the blob's new pull node 2 uses it")
	require.Equal(t, desc.Size, info.Size)
	refs, err = coord.Locker().Refs(ctx, desc.Digest.String())
	require.NoError(t, err)
	require.ElementsMatch(t, []string{"node-1", "node-2"}, refs.Nodes)
}

// TestLibraryModeBlobPutBackAfterDelete: node 1 deleted a blob, and it was
// put back without the coordinator (an uncoordinated write of a node cut
// off meanwhile) before that delete's completion expired. Node 2's use of
// it is refused as a possibly stale view; its write must then end with
// the blob present and node 2 referenced, not with ErrAlreadyExists and
// no reference.
func TestLibraryModeBlobPutBackAfterDelete(t *testing.T) {
	coord := lockservertest.Start(t)
	root := t.TempDir()
	node := func(id string) contentv2.Store {
		c, err := lockclient.New(coord.URL(), lockclient.WithNodeID(id))
		require.NoError(t, err)
		t.Cleanup(func() { c.Close() })
		cs, err := contentv2.NewStore(root, id, contentv2.LockService(c), contentv2.WithMode(contentv2.LibraryMode), contentv2.WithStateDir(t.TempDir()))
		require.NoError(t, err)
		t.Cleanup(func() { cs.Close() })
		return cs
	}
	n1, n2 := node("node-1"), node("node-2")
	ctx := context.Background()
	data, desc := blob("put back ")
	write := func(cs content.Store) error {
		return content.WriteBlob(ctx, cs, "layer-"+desc.Digest.String(), bytes.NewReader(data), desc)
	}
	require.NoError(t, write(n1))
	require.NoError(t, n1.Delete(ctx, desc.Digest))
	require.NoFileExists(t, blobFile(root, desc.Digest))
	require.NoError(t, os.WriteFile(blobFile(root, desc.Digest), data, 0o444), "put back uncoordinated")

	require.NoError(t, write(n2))
	refs, err := coord.Locker().Refs(ctx, desc.Digest.String())
	require.NoError(t, err)
	require.Equal(t, []string{"node-2"}, refs.Nodes, "node 2 uses the blob, so it is referenced")
	got, err := content.ReadBlob(ctx, n2, desc)
	require.NoError(t, err)
	require.Equal(t, data, got)
}
