package integration

import (
	"bytes"
	"context"
	"crypto/rand"
	"testing"

	"github.com/containerd/containerd/v2/core/content"
	"github.com/containerd/containerd/v2/core/images"
	"github.com/containerd/containerd/v2/core/leases"
	"github.com/containerd/containerd/v2/core/metadata"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"github.com/stretchr/testify/require"

	"github.com/sharedcontent/sharedcontent/contentv2"
	"github.com/sharedcontent/sharedcontent/internal/testutil/registry"
)

// imageBlobs returns the blobs of a random image, manifest first, then
// its config and layers.
func imageBlobs(t *testing.T, layers int, layerSize int64) [][]byte {
	t.Helper()
	img, err := random.Image(layerSize, int64(layers))
	require.NoError(t, err)
	blobs, err := registry.RawBlobs(img)
	require.NoError(t, err)
	return blobs
}

// importBlobs writes blobs into n as `ctr images import` does
// (containerd's archive importer, onUntarBlob): each blob through the
// node's metadata store, under ref "tar-" + its path in the archive, with a
// descriptor carrying only its size, so that the writer has no digest,
// neither in the descriptor nor in the ref. The writes are under a lease
// of the node's metadata held until the test ends (as the image record
// the import then creates would hold them); the image record names the
// manifest, blobs[0].
func importBlobs(t *testing.T, ctx context.Context, n *faultNode, name string, blobs [][]byte) {
	t.Helper()
	lm := metadata.NewLeaseManager(n.DB)
	l, err := lm.Create(ctx, leases.WithRandomID())
	require.NoError(t, err)
	ctx = leases.WithLease(ctx, l.ID)
	for _, b := range blobs {
		ref := "tar-blobs/sha256/" + digest.FromBytes(b).Encoded()
		require.NoError(t, content.WriteBlob(ctx, n.CS, ref, bytes.NewReader(b), ocispec.Descriptor{Size: int64(len(b))}),
			"import on %s", n.id)
	}
	m := blobs[0]
	_, err = metadata.NewImageStore(n.DB).Create(ctx, images.Image{Name: name,
		Target: ocispec.Descriptor{MediaType: ocispec.MediaTypeImageManifest, Digest: digest.FromBytes(m), Size: int64(len(m))}})
	require.NoError(t, err)
}

// ingestBlob writes b into n as `ctr content ingest` does: a writer whose
// ref carries no digest, committed with the expected digest, under a lease
// held until the test ends.
func ingestBlob(t *testing.T, ctx context.Context, n *faultNode, b []byte) digest.Digest {
	t.Helper()
	lm := metadata.NewLeaseManager(n.DB)
	l, err := lm.Create(ctx, leases.WithRandomID())
	require.NoError(t, err)
	ctx = leases.WithLease(ctx, l.ID)
	d := digest.FromBytes(b)
	require.NoError(t, content.WriteBlob(ctx, n.CS, "ingest-"+n.id, bytes.NewReader(b), ocispec.Descriptor{Size: int64(len(b))}))
	return d
}

// TestImportWithoutDigestKeepsBlobs: two nodes import the same image as `ctr
// images import` writes it (every blob without a digest, neither in the
// descriptor nor in the ref), and one also ingests a blob as `ctr
// content ingest` does. Every blob committed that way is referenced by its
// node before it becomes visible (docs/design.md §8.1), so a reaper pass
// with no grace reclaims none of them: every blob each node's containerd
// records still reads back.
//
// Before, Commit recorded a reference only for a writer opened with a
// digest: the layers and the ingested blob had no reference, the reaper
// reclaimed them as orphans, and containerd kept listing them.
func TestImportWithoutDigestKeepsBlobs(t *testing.T) {
	e := newFaultEnv(t, faultConfig())
	ctx := nsContext()
	reaper := contentv2.WithReaper(0, 0) // the test runs the passes; no grace
	n1, n2 := e.addNode("node-1", reaper), e.addNode("node-2", reaper)
	e.coord.waitSynced(t, "node-1", "node-2")

	img := imageBlobs(t, 2, 64<<10)
	importBlobs(t, ctx, n1, "example.com/import/a:v1", img)
	importBlobs(t, ctx, n2, "example.com/import/a:v1", img)
	var blobs []digest.Digest
	for _, b := range img {
		blobs = append(blobs, digest.FromBytes(b))
	}
	solo := make([]byte, 32<<10)
	_, _ = rand.Read(solo)
	ingested := ingestBlob(t, ctx, n2, solo)

	rep := reapPass(t, ctx, n1)
	requireReadable(t, ctx, n1, n2)
	require.Zero(t, rep.Orphans, "the reaper removed blobs the nodes imported")
	for _, d := range append(blobs, ingested) {
		require.FileExists(t, blobPath(e.root, d.String()), "blob %s after the reaper", d)
	}
	for _, d := range blobs {
		e.requireRefsOf(t, ctx, d, "node-1", "node-2")
	}
	e.requireRefsOf(t, ctx, ingested, "node-2")
	// A second pass, as the reaper's timer would run it, changes nothing.
	rep = reapPass(t, ctx, n2)
	require.Zero(t, rep.Orphans)
	requireReadable(t, ctx, n1, n2)
}
