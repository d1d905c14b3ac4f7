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

// TestRestoreLocalContent: what containerd's content API lists (a real
// content gRPC server, plugin.Listen, over a local store, standing for
// containerd reading the shared store) and its own store lacks is written
// into its own store, byte for byte; a second run restores nothing.
func TestRestoreLocalContent(t *testing.T) {
	ctx := context.Background()
	hostRoot := t.TempDir()
	listed, err := local.NewStore(filepath.Join(t.TempDir(), "listed"))
	require.NoError(t, err)
	srv, err := plugin.Listen(filepath.Join(hostRoot, DefaultContainerdSocket), listed)
	require.NoError(t, err)
	go srv.Serve(ctx)
	t.Cleanup(func() { srv.Stop(context.Background()) })
	blobs := [][]byte{[]byte("the sandbox's manifest"), make([]byte, 5<<20)}
	for _, b := range blobs {
		require.NoError(t, content.WriteBlob(ctx, listed, "w", bytes.NewReader(b), ocispec.Descriptor{Digest: digest.FromBytes(b), Size: int64(len(b))}))
	}
	dir := filepath.Join(hostRoot, DefaultContainerdRoot, localBlobs)
	require.NoError(t, os.MkdirAll(dir, 0o755))
	// The first is in containerd's own store already, as it was.
	require.NoError(t, os.WriteFile(filepath.Join(dir, digest.FromBytes(blobs[0]).Encoded()), blobs[0], 0o444))

	n, err := restoreLocalContent(ctx, hostRoot, DefaultContainerdRoot, DefaultContainerdSocket)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	for _, b := range blobs {
		p := filepath.Join(dir, digest.FromBytes(b).Encoded())
		got, err := os.ReadFile(p)
		require.NoError(t, err)
		require.Equal(t, b, got)
		st, err := os.Stat(p)
		require.NoError(t, err)
		require.Equal(t, os.FileMode(0o444), st.Mode().Perm())
	}
	n, err = restoreLocalContent(ctx, hostRoot, DefaultContainerdRoot, DefaultContainerdSocket)
	require.NoError(t, err)
	require.Zero(t, n)
	// containerd not running: nothing to restore, no error.
	n, err = restoreLocalContent(ctx, t.TempDir(), DefaultContainerdRoot, DefaultContainerdSocket)
	require.NoError(t, err)
	require.Zero(t, n)
}
