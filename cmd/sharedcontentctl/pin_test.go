package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/containerd/errdefs"
	"github.com/opencontainers/go-digest"
	"github.com/opencontainers/image-spec/specs-go"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"github.com/stretchr/testify/require"

	"github.com/sharedcontent/sharedcontent/contentv2"
	"github.com/sharedcontent/sharedcontent/internal/registry"
	"github.com/sharedcontent/sharedcontent/lockserver/api"
	"github.com/sharedcontent/sharedcontent/lockserver/lockservertest"
)

// testIndex is an image index of two platforms written into a root.
type testIndex struct {
	index             ocispec.Descriptor
	amd64, arm64      []ocispec.Descriptor // manifest, config, layer
	amd64Bytes, total int64
}

// writeBlob writes b into root's blobs and describes it as mt.
func writeBlob(t *testing.T, root, mt string, b []byte) ocispec.Descriptor {
	t.Helper()
	d := digest.FromBytes(b)
	p := filepath.Join(root, "blobs", "sha256", d.Encoded())
	require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
	require.NoError(t, os.WriteFile(p, b, 0o644))
	return ocispec.Descriptor{MediaType: mt, Digest: d, Size: int64(len(b))}
}

func writeJSON(t *testing.T, root, mt string, v any) ocispec.Descriptor {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return writeBlob(t, root, mt, b)
}

// writeIndex writes an index of linux/amd64 and linux/arm64 into root.
func writeIndex(t *testing.T, root string) testIndex {
	t.Helper()
	var ti testIndex
	var manifests []ocispec.Descriptor
	for _, arch := range []string{"amd64", "arm64"} {
		cfg := writeJSON(t, root, ocispec.MediaTypeImageConfig, ocispec.Image{Platform: ocispec.Platform{OS: "linux", Architecture: arch}})
		layer := writeBlob(t, root, ocispec.MediaTypeImageLayerGzip, bytes.Repeat([]byte(arch), 1000))
		m := writeJSON(t, root, ocispec.MediaTypeImageManifest, ocispec.Manifest{Versioned: specs.Versioned{SchemaVersion: 2},
			MediaType: ocispec.MediaTypeImageManifest, Config: cfg, Layers: []ocispec.Descriptor{layer}})
		m.Platform = &ocispec.Platform{OS: "linux", Architecture: arch}
		manifests = append(manifests, m)
		blobs := []ocispec.Descriptor{m, cfg, layer}
		if arch == "amd64" {
			ti.amd64 = blobs
			ti.amd64Bytes = m.Size + cfg.Size + layer.Size
		} else {
			ti.arm64 = blobs
		}
		ti.total += m.Size + cfg.Size + layer.Size
	}
	ti.index = writeJSON(t, root, ocispec.MediaTypeImageIndex, ocispec.Index{Versioned: specs.Versioned{SchemaVersion: 2},
		MediaType: ocispec.MediaTypeImageIndex, Manifests: manifests})
	ti.total += ti.index.Size
	return ti
}

func ids(descs ...ocispec.Descriptor) []string {
	var out []string
	for _, d := range descs {
		out = append(out, d.Digest.String())
	}
	return out
}

// TestPinAddWalksTheImage (docs/design.md §8.21): `pin add` of an index
// pins the index, its manifests and their configs and layers, read from
// the root; --platform limits it to the manifests named; a blob missing
// from the root fails the whole pin, naming it; `pin ls` shows the bytes;
// `pin rm` drops it. Against a real coordinator.
func TestPinAddWalksTheImage(t *testing.T) {
	srv := lockservertest.Start(t)
	root := t.TempDir()
	ti := writeIndex(t, root)
	ctx := context.Background()
	base := []string{"--coordinator", srv.URL(), "--root", root}

	// Every platform.
	var got pinRow
	require.NoError(t, json.Unmarshal([]byte(ctl(t, append(base, "-o", "json", "pin", "add", ti.index.Digest.String(), "--name", "all")...)), &got))
	want := append(append(ids(ti.index), ids(ti.amd64...)...), ids(ti.arm64...)...)
	require.ElementsMatch(t, want, got.ResourceIDs)
	require.Equal(t, ti.total, *got.Bytes)
	require.Nil(t, got.Expires)

	// One platform, with an expiry.
	ctl(t, append(base, "pin", "add", "--platform", "linux/amd64", ti.index.Digest.String(), "--name", "amd64", "--expires", "24h")...)
	p, err := srv.Core().Pin(ctx, "amd64")
	require.NoError(t, err)
	require.ElementsMatch(t, append(ids(ti.index), ids(ti.amd64...)...), p.ResourceIDs)
	require.NotNil(t, p.Expires)
	refs, err := srv.Core().Refs(ctx, ti.amd64[2].Digest.String())
	require.NoError(t, err)
	require.Equal(t, []string{"pin/all", "pin/amd64"}, refs.Nodes)

	// A blob missing: every platform fails naming it, nothing pinned.
	missing := ti.arm64[2].Digest
	require.NoError(t, os.Remove(filepath.Join(root, "blobs", "sha256", missing.Encoded())))
	var out bytes.Buffer
	err = run(append(base, "pin", "add", ti.index.Digest.String(), "--name", "broken"), &out, io.Discard)
	require.ErrorIs(t, err, errdefs.ErrNotFound)
	require.ErrorContains(t, err, missing.String())
	require.ErrorContains(t, err, "--platform")
	_, err = srv.Core().Pin(ctx, "broken")
	require.ErrorIs(t, err, api.ErrNotFound)

	// pin ls: the bytes in the root, and what is missing there.
	var rows []pinRow
	require.NoError(t, json.Unmarshal([]byte(ctl(t, append(base, "-o", "json", "pin", "ls")...)), &rows))
	require.Len(t, rows, 2)
	require.Equal(t, "all", rows[0].Name)
	require.Equal(t, []string{missing.String()}, rows[0].Missing)
	require.Equal(t, ti.amd64Bytes+ti.index.Size, *rows[1].Bytes)
	table := ctl(t, append(base, "pin", "ls")...)
	require.Contains(t, table, "(1 missing)")
	require.Contains(t, table, "never")

	require.Contains(t, ctl(t, append(base, "pin", "rm", "all")...), "dropped pin all")
	refs, err = srv.Core().Refs(ctx, ti.amd64[2].Digest.String())
	require.NoError(t, err)
	require.Equal(t, []string{"pin/amd64"}, refs.Nodes)
	err = run(append(base, "pin", "rm", "all"), &out, io.Discard)
	require.ErrorIs(t, err, api.ErrNotFound)
}

// TestPinAddImageName: an image name is resolved through the registry
// (resolveImage): a resolution that fails is a clear error that says what
// to do and pins nothing; the digest it resolves to is pinned from the
// root, named after the image.
func TestPinAddImageName(t *testing.T) {
	srv := lockservertest.Start(t)
	root := t.TempDir()
	ti := writeIndex(t, root)
	base := []string{"--coordinator", srv.URL(), "--root", root}
	was := resolveImage
	t.Cleanup(func() { resolveImage = was })
	resolveImage = func(_ context.Context, image string, o registry.Options) (digest.Digest, error) {
		return "", fmt.Errorf("%s: no such host: %w", image, errdefs.ErrNotFound)
	}
	var out bytes.Buffer
	err := run(append(base, "pin", "add", "example.com/web:1"), &out, io.Discard)
	require.ErrorIs(t, err, errdefs.ErrNotFound)
	require.ErrorContains(t, err, "pin its manifest digest")
	pins, err := srv.Core().Pins(context.Background())
	require.NoError(t, err)
	require.Empty(t, pins.Pins, "a failed resolution pins nothing")

	resolveImage = func(_ context.Context, image string, o registry.Options) (digest.Digest, error) {
		require.Equal(t, "example.com/web:1", image)
		require.Equal(t, "u:p", o.User, "pin add passes the registry flags to the resolver")
		return ti.index.Digest, nil
	}
	require.Contains(t, ctl(t, append(base, "pin", "add", "example.com/web:1", "--platform", "linux/arm64", "--user", "u:p")...), "pinned example.com-web-1: 4 blob(s)")
	p, err := srv.Core().Pin(context.Background(), "example.com-web-1")
	require.NoError(t, err)
	require.Equal(t, "example.com/web:1", p.Image)

	// Bad input is refused before anything is asked.
	for _, args := range [][]string{
		{"pin", "add", ti.index.Digest.String(), "--platform", "linux/+"},
		{"pin", "add", ti.index.Digest.String(), "--name", "-x"},
		{"pin", "add", "sha256:123"},
		{"pin", "rm", "a/b"},
	} {
		require.Error(t, run(append(base, args...), &out, io.Discard), "%v", args)
	}
	err = run([]string{"--coordinator", srv.URL(), "pin", "add", ti.index.Digest.String()}, &out, io.Discard)
	require.ErrorContains(t, err, "--root is required")
}

// TestAdoptRestoresPins (docs/design.md §8.10, §8.21): `pin add` keeps a
// copy of the pin in the shared root; a coordinator that lost its
// database and adopts the root gets every unexpired pin back, with its
// references; `pin rm --root` removes the copy, so an adoption does not
// bring that pin back.
func TestAdoptRestoresPins(t *testing.T) {
	srv := lockservertest.Start(t)
	root := t.TempDir()
	ti := writeIndex(t, root)
	ctx := context.Background()
	base := []string{"--coordinator", srv.URL(), "--root", root}
	ctl(t, append(base, "pin", "add", ti.index.Digest.String(), "--name", "keep", "--platform", "linux/amd64")...)
	ctl(t, append(base, "pin", "add", ti.amd64[0].Digest.String(), "--name", "gone")...)
	ctl(t, append(base, "pin", "rm", "gone")...)
	_, err := os.Stat(filepath.Join(root, ".sharedcontent", "pins", "gone.json"))
	require.ErrorIs(t, err, os.ErrNotExist, "pin rm --root removes the root's copy")

	// The root is the cluster's; the coordinator loses its database.
	b, err := json.Marshal(contentv2.ClusterFile{ClusterID: srv.Core().Cluster().ClusterID, CreatedAt: time.Now(), CreatedBy: "node-1"})
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(root, ".sharedcontent", "cluster.json"), b, 0o644))
	require.NoError(t, contentv2.WriteNodeMarker(root, "node-1"))
	srv.Wipe()
	ps, err := srv.Core().Pins(ctx)
	require.NoError(t, err)
	require.Empty(t, ps.Pins, "a wiped coordinator has no pins")

	out := ctl(t, append(base, "cluster", "adopt")...)
	require.Contains(t, out, "restored 1 pin(s) from the root's copies: keep")
	p, err := srv.Core().Pin(ctx, "keep")
	require.NoError(t, err)
	require.ElementsMatch(t, append(ids(ti.index), ids(ti.amd64...)...), p.ResourceIDs)
	refs, err := srv.Core().Refs(ctx, ti.amd64[2].Digest.String())
	require.NoError(t, err)
	require.Equal(t, []string{"pin/keep"}, refs.Nodes)
	_, err = srv.Core().Pin(ctx, "gone")
	require.ErrorIs(t, err, api.ErrNotFound)
}
