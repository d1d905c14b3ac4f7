package e2ek8s

import (
	"archive/tar"
	"bytes"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/stretchr/testify/require"
)

// pauseTag is the sandbox image's tag, as Kubernetes 1.34's.
const pauseTag = "3.10"

func (c *cluster) pauseRef() string { return c.reg.Host + "/pause:" + pauseTag }

// image is an image pushed to the cluster's registry.
type image struct {
	ref      string
	manifest string   // digest
	blobs    []string // config and layers
}

// pauseImage is one layer holding /pause (integration/e2ek8s/pause), its
// entrypoint, for this machine's platform.
func pauseImage() (v1.Image, error) {
	bin, err := os.ReadFile(bins.pause)
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	if err := tw.WriteHeader(&tar.Header{Name: "pause", Mode: 0o755, Size: int64(len(bin)), Typeflag: tar.TypeReg, ModTime: time.Unix(0, 0)}); err != nil {
		return nil, err
	}
	if _, err := tw.Write(bin); err != nil {
		return nil, err
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(buf.Bytes())), nil })
	if err != nil {
		return nil, err
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", runtime.GOARCH
	cf.Config.Entrypoint = []string{"/pause"}
	return mutate.ConfigFile(img, cf)
}

// push writes img to the registry as repo:tag.
func (c *cluster) push(img v1.Image, repo, tag string) image {
	t := c.t
	t.Helper()
	ref, err := name.ParseReference(c.reg.Host+"/"+repo+":"+tag, name.Insecure)
	require.NoError(t, err)
	require.NoError(t, remote.Write(ref, img))
	m, err := img.Manifest()
	require.NoError(t, err)
	d, err := img.Digest()
	require.NoError(t, err)
	out := image{ref: ref.String(), manifest: d.String(), blobs: []string{m.Config.Digest.String()}}
	for _, l := range m.Layers {
		out.blobs = append(out.blobs, l.Digest.String())
	}
	return out
}

// pushPause pushes the sandbox image (containerd's pinned sandbox).
func (c *cluster) pushPause() {
	img, err := pauseImage()
	require.NoError(c.t, err)
	c.push(img, "pause", pauseTag)
}

// pushApp pushes the test workload's image: the pause binary, then
// `layers` random layers of size bytes each (distinct every call).
func (c *cluster) pushApp(repo, tag string, layers int, size int64) image {
	base, err := pauseImage()
	require.NoError(c.t, err)
	img := base
	for range layers {
		l, err := random.Layer(size, types.DockerLayer)
		require.NoError(c.t, err)
		img, err = mutate.AppendLayers(img, l)
		require.NoError(c.t, err)
	}
	return c.push(img, repo, tag)
}

// pushSharedcontent builds the image with `make image` (this machine's
// platform, tagged tag) and pushes it as <registry>/sharedcontent:tag
// with mkimage push, the operators' commands.
func (c *cluster) pushSharedcontent(tag string) string {
	t := c.t
	t.Helper()
	t0 := time.Now()
	dir := filepath.Join(binDir, "e2ek8s-image-"+tag)
	out, err := run(repoRoot, nil, "make", "--no-print-directory", "image", "BIN="+dir,
		"IMAGE_PLATFORMS=linux/"+runtime.GOARCH, "IMAGE_NAME=sharedcontent", "IMAGE_VERSION="+tag)
	require.NoError(t, err, "make image:\n%s", tail(out, 30))
	ref := c.reg.Host + "/sharedcontent:" + tag
	out, err = run(repoRoot, nil, bins.mkimage, "push", "-insecure", "-in", filepath.Join(dir, "sharedcontent-image.tar"), ref)
	require.NoError(t, err, "mkimage push:\n%s", tail(out, 30))
	t.Logf("e2e-k8s: make image and push %s (%.1fs)", ref, time.Since(t0).Seconds())
	return ref
}

// imageBlobs lists every digest of ref in the registry: the index (if
// any), the manifests, configs and layers.
func (c *cluster) imageBlobs(t *testing.T, ref string) []string {
	t.Helper()
	r, err := name.ParseReference(ref, name.Insecure)
	require.NoError(t, err)
	desc, err := remote.Get(r)
	require.NoError(t, err)
	out := []string{desc.Digest.String()}
	addImage := func(img v1.Image) {
		m, err := img.Manifest()
		require.NoError(t, err)
		out = append(out, m.Config.Digest.String())
		for _, l := range m.Layers {
			out = append(out, l.Digest.String())
		}
	}
	if desc.MediaType.IsIndex() {
		idx, err := desc.ImageIndex()
		require.NoError(t, err)
		im, err := idx.IndexManifest()
		require.NoError(t, err)
		for _, m := range im.Manifests {
			out = append(out, m.Digest.String())
			img, err := idx.Image(m.Digest)
			require.NoError(t, err)
			addImage(img)
		}
		return out
	}
	img, err := desc.Image()
	require.NoError(t, err)
	addImage(img)
	return out
}
