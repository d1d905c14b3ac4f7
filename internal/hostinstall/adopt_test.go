package hostinstall

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/containerd/containerd/v2/core/content"
	"github.com/containerd/containerd/v2/plugins/content/local"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"github.com/stretchr/testify/require"

	"github.com/sharedcontent/sharedcontent/plugin"
)

// TestAdoptLocalContent: the blobs of containerd's own store are written
// into the store the daemon's socket serves (a real content gRPC server,
// plugin.Listen, over a local store here), those it has already are
// skipped, and a second run adopts nothing.
func TestAdoptLocalContent(t *testing.T) {
	ctx := context.Background()
	hostRoot := t.TempDir()
	shared, err := local.NewStore(filepath.Join(t.TempDir(), "shared"))
	require.NoError(t, err)
	socket := "/run/sharedcontent/sharedcontent.sock"
	srv, err := plugin.Listen(filepath.Join(hostRoot, socket), shared)
	require.NoError(t, err)
	go srv.Serve(ctx)
	t.Cleanup(func() { srv.Stop(context.Background()) })

	blobs := [][]byte{[]byte("a manifest"), []byte("a config"), make([]byte, 3<<20)}
	dir := filepath.Join(hostRoot, DefaultContainerdRoot, localBlobs)
	require.NoError(t, os.MkdirAll(dir, 0o755))
	var dgsts []digest.Digest
	for _, b := range blobs {
		d := digest.FromBytes(b)
		dgsts = append(dgsts, d)
		require.NoError(t, os.WriteFile(filepath.Join(dir, d.Encoded()), b, 0o444))
	}
	// Not a blob: ignored.
	require.NoError(t, os.WriteFile(filepath.Join(dir, "not-a-digest"), []byte("x"), 0o444))
	// The shared store has the first already.
	require.NoError(t, content.WriteBlob(ctx, shared, "pre", bytes.NewReader(blobs[0]), ocispec.Descriptor{Digest: dgsts[0], Size: int64(len(blobs[0]))}))

	n, err := adoptLocalContent(ctx, hostRoot, DefaultContainerdRoot, socket)
	require.NoError(t, err)
	require.Equal(t, 2, n)
	for i, d := range dgsts {
		got, err := content.ReadBlob(ctx, shared, ocispec.Descriptor{Digest: d, Size: int64(len(blobs[i]))})
		require.NoError(t, err, "blob %d", i)
		require.Equal(t, blobs[i], got)
	}
	n, err = adoptLocalContent(ctx, hostRoot, DefaultContainerdRoot, socket)
	require.NoError(t, err)
	require.Zero(t, n, "a second run adopts nothing")

	// A node whose containerd never stored anything: nothing to do, no
	// connection needed.
	n, err = adoptLocalContent(ctx, t.TempDir(), DefaultContainerdRoot, socket)
	require.NoError(t, err)
	require.Zero(t, n)
}
