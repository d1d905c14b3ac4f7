package plugin_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	diffapi "github.com/containerd/containerd/api/services/diff/v1"
	"github.com/containerd/containerd/v2/core/content"
	"github.com/containerd/containerd/v2/core/diff"
	diffproxy "github.com/containerd/containerd/v2/core/diff/proxy"
	"github.com/containerd/containerd/v2/core/mount"
	"github.com/containerd/containerd/v2/plugins/content/local"
	"github.com/containerd/errdefs"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sharedcontent/sharedcontent/plugin"
)

// differ is what containerd's diff proxy client gives a proxy plugin of type
// "diff".
type differ interface {
	diff.Applier
	diff.Comparer
}

// serveDiff serves a fresh local store and returns it with containerd's own
// diff proxy client, as containerd's proxy_plugins build it.
func serveDiff(t *testing.T) (content.Store, differ) {
	t.Helper()
	dir := t.TempDir()
	cs, err := local.NewStore(filepath.Join(dir, "root"))
	require.NoError(t, err)
	srv, err := plugin.Listen(filepath.Join(dir, "sc.sock"), cs)
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- srv.Serve(context.Background()) }()
	t.Cleanup(func() {
		srv.Stop(context.Background())
		require.NoError(t, <-done)
	})
	conn, err := grpc.NewClient("unix://"+filepath.Join(dir, "sc.sock"),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	return cs, diffproxy.NewDiffApplier(diffapi.NewDiffClient(conn)).(differ)
}

// layer is a tar+gzip layer of files (path → content), owned by the test's
// own uid so that applying it needs no privilege. It returns the blob and
// the digest of the uncompressed tar (the diff ID).
func layer(t *testing.T, files map[string]string) ([]byte, digest.Digest) {
	t.Helper()
	var tarball bytes.Buffer
	tw := tar.NewWriter(&tarball)
	for name, body := range files {
		require.NoError(t, tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(body)),
			Uid: os.Getuid(), Gid: os.Getgid(), ModTime: time.Unix(1e9, 0), Typeflag: tar.TypeReg}))
		_, err := tw.Write([]byte(body))
		require.NoError(t, err)
	}
	require.NoError(t, tw.Close())
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	_, err := zw.Write(tarball.Bytes())
	require.NoError(t, err)
	require.NoError(t, zw.Close())
	return gz.Bytes(), digest.FromBytes(tarball.Bytes())
}

// storeLayer writes blob to cs and returns its descriptor.
func storeLayer(t *testing.T, cs content.Store, blob []byte) ocispec.Descriptor {
	t.Helper()
	desc := ocispec.Descriptor{MediaType: ocispec.MediaTypeImageLayerGzip, Digest: digest.FromBytes(blob), Size: int64(len(blob))}
	require.NoError(t, content.WriteBlob(context.Background(), cs, "layer-"+desc.Digest.String(), bytes.NewReader(blob), desc))
	return desc
}

// TestDiffApplyOverSocket applies a gzip layer from the store through the
// daemon's Diff API into an overlay snapshot's upper directory, which
// containerd's applier writes without mounting anything (no root needed).
func TestDiffApplyOverSocket(t *testing.T) {
	cs, d := serveDiff(t)
	ctx := context.Background()
	blob, diffID := layer(t, map[string]string{"etc/hello": "hello from the shared directory\n", "bin/tool": "#!/bin/sh\n"})
	desc := storeLayer(t, cs, blob)

	dir := t.TempDir()
	upper, lower := filepath.Join(dir, "upper"), filepath.Join(dir, "lower")
	require.NoError(t, os.Mkdir(upper, 0o755))
	require.NoError(t, os.Mkdir(lower, 0o755))
	overlay := []mount.Mount{{Type: "overlay", Source: "overlay",
		Options: []string{"workdir=" + filepath.Join(dir, "work"), "upperdir=" + upper, "lowerdir=" + lower}}}

	applied, err := d.Apply(ctx, desc, overlay)
	require.NoError(t, err)
	require.Equal(t, diffID, applied.Digest, "Apply answers the uncompressed layer's digest")
	require.Equal(t, ocispec.MediaTypeImageLayer, applied.MediaType)
	got, err := os.ReadFile(filepath.Join(upper, "etc", "hello"))
	require.NoError(t, err)
	require.Equal(t, "hello from the shared directory\n", string(got))
	require.FileExists(t, filepath.Join(upper, "bin", "tool"))

	// A layer the store lacks is NotFound, its class surviving gRPC.
	missing := ocispec.Descriptor{MediaType: ocispec.MediaTypeImageLayerGzip, Digest: digest.FromString("absent"), Size: 6}
	_, err = d.Apply(ctx, missing, overlay)
	require.True(t, errdefs.IsNotFound(err), "Apply of a blob not in the store: %v", err)
}

// TestDiffBindMount applies a layer into a bind mount, as containerd sends
// the first layer of an overlayfs snapshot. That mounts, so it needs root.
func TestDiffBindMount(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounting needs root")
	}
	cs, d := serveDiff(t)
	ctx := context.Background()
	blob, diffID := layer(t, map[string]string{"data/file": "bind-mounted\n"})
	desc := storeLayer(t, cs, blob)

	target := t.TempDir()
	bind := []mount.Mount{{Type: "bind", Source: target, Options: []string{"rbind", "rw"}}}
	applied, err := d.Apply(ctx, desc, bind)
	require.NoError(t, err)
	require.Equal(t, diffID, applied.Digest)
	got, err := os.ReadFile(filepath.Join(target, "data", "file"))
	require.NoError(t, err)
	require.Equal(t, "bind-mounted\n", string(got))

}

// TestDiffCompareNotServed: Compare answers NotImplemented, the answer on
// which containerd's diff service tries its next differ (see diff.go).
func TestDiffCompareNotServed(t *testing.T) {
	_, d := serveDiff(t)
	dir := t.TempDir()
	bind := []mount.Mount{{Type: "bind", Source: dir, Options: []string{"rbind", "ro"}}}
	_, err := d.Compare(context.Background(), bind, bind, diff.WithMediaType(ocispec.MediaTypeImageLayer))
	require.True(t, errdefs.IsNotImplemented(err), "Compare: %v", err)
}
