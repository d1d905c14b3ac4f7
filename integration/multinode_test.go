package integration

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/containerd/containerd/v2/core/content"
	"github.com/containerd/containerd/v2/plugins/content/local"
	"github.com/containerd/errdefs"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"github.com/stretchr/testify/require"

	"github.com/sharedcontent/sharedcontent/contentv2"
	"github.com/sharedcontent/sharedcontent/contentv2/contentv2test"
	"github.com/sharedcontent/sharedcontent/internal/testutil/registry"
)

const (
	testLayers    = 4
	testLayerSize = 2 << 20
)

func startRegistry(t *testing.T, opts ...registry.Option) (*registry.Registry, registry.Image) {
	t.Helper()
	reg, err := registry.Start(opts...)
	require.NoError(t, err)
	t.Cleanup(func() { reg.Close() })
	img, err := reg.PushRandom(context.Background(), "test/app:v1", testLayers, testLayerSize)
	require.NoError(t, err)
	reg.ResetCounters()
	return reg, img
}

func requireEachOnce(t *testing.T, reg *registry.Registry, img registry.Image, extra map[string]int) {
	t.Helper()
	gets := reg.BlobGets()
	for _, d := range img.Blobs() {
		require.Equal(t, 1+extra[d], gets[d], "GETs of %s (all GETs: %v)", d, gets)
	}
}

// TestConcurrentPullDownloadsEachBlobOnce: three nodes pull one image at
// once; the registry serves every blob exactly once and every node reads
// every blob back intact.
func TestConcurrentPullDownloadsEachBlobOnce(t *testing.T) {
	reg, img := startRegistry(t, registry.WithBandwidth(64<<20))
	c := newCluster(t, 3)
	ctx := nsContext()
	for _, err := range c.pullAll(ctx, img.Ref, contentv2test.PullOptions{}) {
		require.NoError(t, err)
	}
	requireEachOnce(t, reg, img, nil)
	requireIntact(t, ctx, c.nodes, img)
	t.Logf("registry sent %d bytes for a %d-byte image pulled by %d nodes", reg.BlobBytes(), img.Size(), len(c.nodes))
	require.LessOrEqual(t, reg.BlobBytes(), img.Size())

	// Every node is a reference of every blob.
	for _, d := range img.Blobs() {
		refs, err := c.nodes[0].client.Refs(ctx, d)
		require.NoError(t, err)
		require.ElementsMatch(t, []string{"node-1", "node-2", "node-3"}, refs.Nodes, d)
	}
}

// failingStore fails the first write of one blob mid-way, on whichever
// node downloads it first.
type failingStore struct {
	content.Store
	target digest.Digest
	after  int64
	fired  *atomic.Bool
}

func (s *failingStore) Writer(ctx context.Context, opts ...content.WriterOpt) (content.Writer, error) {
	w, err := s.Store.Writer(ctx, opts...)
	if err != nil {
		return nil, err
	}
	var wo content.WriterOpts
	for _, o := range opts {
		o(&wo)
	}
	if strings.Contains(wo.Ref, s.target.Encoded()) {
		return &failingWriter{Writer: w, s: s}, nil
	}
	return w, nil
}

type failingWriter struct {
	content.Writer
	s       *failingStore
	written int64
}

var errInjected = errors.New("injected write failure")

func (w *failingWriter) Write(p []byte) (int, error) {
	if w.written+int64(len(p)) > w.s.after && w.s.fired.CompareAndSwap(false, true) {
		return 0, errInjected
	}
	n, err := w.Writer.Write(p)
	w.written += int64(n)
	return n, err
}

// TestHolderFailureHandsOver: the node downloading a layer fails half-way;
// another node takes over, the pull completes everywhere, and the registry
// serves that layer one extra time.
func TestHolderFailureHandsOver(t *testing.T) {
	reg, img := startRegistry(t, registry.WithBandwidth(32<<20))
	target := digest.Digest(img.Layers[1].Digest.String())
	fired := &atomic.Bool{}
	c := newCluster(t, 0)
	for i := range 3 {
		ls, err := local.NewStore(c.root)
		require.NoError(t, err)
		fs := &failingStore{Store: ls, target: target, after: testLayerSize / 2, fired: fired}
		c.nodes = append(c.nodes, c.addNode(t, fmt.Sprintf("node-%d", i+1), contentv2.WithLocalStore(fs)))
	}
	ctx := nsContext()
	// One blob at a time per node, so the failure aborts no sibling
	// download of the failing node (each would be another GET).
	errs := c.pullAll(ctx, img.Ref, contentv2test.PullOptions{Concurrency: 1})
	require.True(t, fired.Load(), "the failure was injected")
	failed := 0
	for i, err := range errs {
		if err != nil {
			require.ErrorIs(t, err, errInjected)
			failed++
			// The failed node pulls again and shares the others' download.
			_, err = pull(ctx, c.nodes[i].CS, img.Ref)
			require.NoError(t, err)
		}
	}
	require.Equal(t, 1, failed, "exactly the holder's pull failed")
	requireEachOnce(t, reg, img, map[string]int{target.String(): 1})
	requireIntact(t, ctx, c.nodes, img)
}

func blobPath(root string, d string) string {
	dg := digest.Digest(d)
	return filepath.Join(root, "blobs", dg.Algorithm().String(), dg.Encoded())
}

// TestGCKeepsBlobsOthersUse: containerd's garbage collector on node 1 tries
// to delete every blob (node 1 has no image record), but they stay while
// nodes 2 and 3 use them; once every node has collected, they are gone.
func TestGCKeepsBlobsOthersUse(t *testing.T) {
	_, img := startRegistry(t)
	c := newCluster(t, 3)
	ctx := nsContext()
	for _, err := range c.pullAll(ctx, img.Ref, contentv2test.PullOptions{}) {
		require.NoError(t, err)
	}

	_, err := c.nodes[0].DB.GarbageCollect(ctx)
	require.NoError(t, err)
	for _, d := range img.Blobs() {
		require.FileExists(t, blobPath(c.root, d), "node 1's GC deleted a blob nodes 2 and 3 use")
		refs, err := c.nodes[1].client.Refs(ctx, d)
		require.NoError(t, err)
		require.ElementsMatch(t, []string{"node-2", "node-3"}, refs.Nodes)
	}
	requireIntact(t, ctx, c.nodes[1:], img)

	_, err = c.nodes[1].DB.GarbageCollect(ctx)
	require.NoError(t, err)
	for _, d := range img.Blobs() {
		require.FileExists(t, blobPath(c.root, d))
	}
	_, err = c.nodes[2].DB.GarbageCollect(ctx)
	require.NoError(t, err)
	for _, d := range img.Blobs() {
		require.NoFileExists(t, blobPath(c.root, d), "the last user's GC removes the blob")
		refs, err := c.nodes[0].client.Refs(ctx, d)
		require.NoError(t, err)
		require.Zero(t, refs.Count)
	}
	entries, err := os.ReadDir(filepath.Join(c.root, "ingest"))
	require.NoError(t, err)
	require.Empty(t, entries, "no ingest left behind")
}

// TestDeleteRacingPull: node 1's GC deletes a blob while node 2 fetches
// the same blob. Whatever the interleaving, a node whose fetch succeeded
// can read the blob afterwards.
func TestDeleteRacingPull(t *testing.T) {
	c := newCluster(t, 2)
	a, b := c.nodes[0], c.nodes[1]
	ctx := nsContext()
	const rounds = 40
	deleted := 0
	for i := range rounds {
		data := bytes.Repeat([]byte(fmt.Sprintf("round %d ", i)), 4096)
		desc := ocispec.Descriptor{MediaType: ocispec.MediaTypeImageLayer, Digest: digest.FromBytes(data), Size: int64(len(data))}
		ref := "layer-" + desc.Digest.String()
		require.NoError(t, content.WriteBlob(ctx, a.CS, ref, bytes.NewReader(data), desc))

		var wg sync.WaitGroup
		var gcErr, pullErr error
		wg.Go(func() { _, gcErr = a.DB.GarbageCollect(ctx) })
		wg.Go(func() { pullErr = content.WriteBlob(ctx, b.CS, ref, bytes.NewReader(data), desc) })
		wg.Wait()
		require.NoError(t, gcErr)
		require.NoError(t, pullErr)

		got, err := content.ReadBlob(ctx, b.CS, desc)
		require.NoError(t, err, "round %d: node 2 fetched the blob but cannot read it", i)
		require.Equal(t, desc.Digest, digest.FromBytes(got))
		if _, err := os.Stat(blobPath(c.root, desc.Digest.String())); err != nil {
			t.Fatalf("round %d: blob file missing while node 2 uses it: %v", i, err)
		}
		refs, err := b.client.Refs(ctx, desc.Digest.String())
		require.NoError(t, err)
		require.Contains(t, refs.Nodes, "node-2", "round %d", i)
		if !slices.Contains(refs.Nodes, "node-1") {
			deleted++
		}
		// Clean up for the next round: node 2 collects too.
		_, err = b.DB.GarbageCollect(ctx)
		require.NoError(t, err)
		_, err = b.CS.Info(ctx, desc.Digest)
		require.True(t, errdefs.IsNotFound(err), "round %d: %v", i, err)
	}
	t.Logf("%d rounds; node 1's reference was dropped in %d", rounds, deleted)
}
