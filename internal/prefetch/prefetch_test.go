package prefetch

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"github.com/containerd/containerd/v2/core/content"
	"github.com/containerd/containerd/v2/core/remotes"
	"github.com/containerd/containerd/v2/core/remotes/docker"
	"github.com/containerd/errdefs"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/opencontainers/go-digest"
	"github.com/stretchr/testify/require"

	"github.com/sharedcontent/sharedcontent/contentv2"
	"github.com/sharedcontent/sharedcontent/contentv2/contentv2test"
	cv2remote "github.com/sharedcontent/sharedcontent/contentv2/remote"
	testregistry "github.com/sharedcontent/sharedcontent/internal/testutil/registry"
	"github.com/sharedcontent/sharedcontent/lockclient"
	"github.com/sharedcontent/sharedcontent/lockserver/lockservertest"
)

// cluster is a coordinator on loopback and a shared root.
type cluster struct {
	url, root string
}

func newCluster(t *testing.T) cluster {
	return cluster{url: lockservertest.Start(t).URL(), root: t.TempDir()}
}

// client is a lockclient for node id, closed with the test.
func (c cluster) client(t *testing.T, id string) *lockclient.Client {
	t.Helper()
	cl, err := lockclient.New(c.url, lockclient.WithNodeID(id))
	require.NoError(t, err)
	t.Cleanup(func() { cl.Close() })
	return cl
}

// prefetchStore opens the store a prefetch uses: library mode, node id.
func (c cluster) prefetchStore(t *testing.T, id string) contentv2.Store {
	t.Helper()
	s, err := contentv2.NewStore(c.root, id, cv2remote.New(c.client(t, id)),
		contentv2.WithMode(contentv2.LibraryMode), contentv2.WithStateDir(t.TempDir()))
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	return s
}

// startRegistry serves a registry until the test ends.
func startRegistry(t *testing.T, opts ...testregistry.Option) *testregistry.Registry {
	t.Helper()
	reg, err := testregistry.Start(opts...)
	require.NoError(t, err)
	t.Cleanup(func() { reg.Close() })
	return reg
}

func plainResolver() remotes.Resolver {
	return docker.NewResolver(docker.ResolverOptions{Hosts: docker.ConfigureDefaultRegistries(docker.WithPlainHTTP(docker.MatchAllHosts))})
}

// present reports whether the shared root has the blob d.
func present(t *testing.T, root, d string) bool {
	t.Helper()
	dg := digest.Digest(d)
	_, err := os.Stat(filepath.Join(root, "blobs", dg.Algorithm().String(), dg.Encoded()))
	if err != nil {
		require.ErrorIs(t, err, os.ErrNotExist)
		return false
	}
	return true
}

// TestFetchOnceThenPresent: a fetch downloads every blob of the image
// into the shared root once, references each for its node, and reports
// progress; a second fetch downloads nothing and finds each present.
func TestFetchOnceThenPresent(t *testing.T) {
	ctx := context.Background()
	reg := startRegistry(t)
	img, err := reg.PushRandom(ctx, "test/img:v1", 3, 64<<10)
	require.NoError(t, err)
	reg.ResetCounters()
	c := newCluster(t)
	cs := c.prefetchStore(t, "prefetch-a")

	var started, done int
	var wrote int64
	res, err := Fetch(ctx, cs, plainResolver(), img.Ref, Options{Progress: func(e Event) {
		switch e.Kind {
		case Started:
			started++
		case Wrote:
			wrote += e.Bytes
		case Done:
			done++
		}
	}})
	require.NoError(t, err)
	require.Equal(t, img.Manifest.Digest.String(), res.Target.Digest.String())
	want := img.Blobs()
	require.ElementsMatch(t, want, res.Digests())
	fetched, presentN, size := res.Counts()
	require.Equal(t, len(want), fetched)
	require.Zero(t, presentN)
	require.Equal(t, img.Size(), size)
	require.Equal(t, img.Size(), res.FetchedBytes)
	require.Equal(t, img.Size(), wrote, "progress saw every byte written")
	require.Equal(t, len(want), started)
	require.Equal(t, len(want), done)
	for _, d := range want {
		require.True(t, present(t, c.root, d), d)
		require.Equal(t, 1, reg.BlobGets()[d], "%s downloaded once", d)
		refs, err := c.client(t, "reader").Refs(ctx, d)
		require.NoError(t, err)
		require.Equal(t, []string{"prefetch-a"}, refs.Nodes, "the prefetch's node references %s", d)
	}

	reg.ResetCounters()
	again, err := Fetch(ctx, cs, plainResolver(), img.Ref, Options{})
	require.NoError(t, err)
	fetched, presentN, _ = again.Counts()
	require.Zero(t, fetched)
	require.Equal(t, len(want), presentN)
	require.Zero(t, reg.BlobBytes(), "blobs present are not downloaded")
}

// TestFetchPlatforms: with platforms named, only their manifests (and
// the index) are fetched, with their configs and layers.
func TestFetchPlatforms(t *testing.T) {
	ctx := context.Background()
	reg := startRegistry(t)
	amd, err := random.Image(32<<10, 2)
	require.NoError(t, err)
	arm, err := random.Image(32<<10, 2)
	require.NoError(t, err)
	idx := mutate.AppendManifests(empty.Index,
		mutate.IndexAddendum{Add: amd, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: "amd64"}}},
		mutate.IndexAddendum{Add: arm, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: "arm64"}}})
	ref, err := name.ParseReference(reg.Host+"/test/multi:v1", name.Insecure)
	require.NoError(t, err)
	require.NoError(t, remote.WriteIndex(ref, idx))
	c := newCluster(t)
	cs := c.prefetchStore(t, "prefetch-a")

	res, err := Fetch(ctx, cs, plainResolver(), ref.String(), Options{Platforms: []string{"linux/arm64"}})
	require.NoError(t, err)
	idxDigest, err := idx.Digest()
	require.NoError(t, err)
	want := []string{idxDigest.String()}
	blobs := func(img v1.Image) []string {
		m, err := img.Manifest()
		require.NoError(t, err)
		d, err := img.Digest()
		require.NoError(t, err)
		out := []string{d.String(), m.Config.Digest.String()}
		for _, l := range m.Layers {
			out = append(out, l.Digest.String())
		}
		return out
	}
	want = append(want, blobs(arm)...)
	require.ElementsMatch(t, want, res.Digests())
	for _, d := range blobs(amd) {
		require.False(t, present(t, c.root, d), "amd64's %s is not fetched", d)
	}

	_, err = Fetch(ctx, cs, plainResolver(), ref.String(), Options{Platforms: []string{"linux/"}})
	require.ErrorIs(t, err, errdefs.ErrInvalidArgument)
	require.ErrorContains(t, err, `--platform "linux/"`)
}

// TestFetchRacesANode: a prefetch and a node's pull (containerd's
// metadata over the node's store) of the same image at the same time
// download each blob once, and both end with every blob.
func TestFetchRacesANode(t *testing.T) {
	ctx := contentv2test.Context(context.Background())
	reg := startRegistry(t, testregistry.WithBandwidth(8<<20))
	img, err := reg.PushRandom(ctx, "test/img:v1", 4, 512<<10)
	require.NoError(t, err)
	reg.ResetCounters()
	c := newCluster(t)
	cs := c.prefetchStore(t, "prefetch-a")
	node, err := contentv2test.NewNode(ctx, "node-1", c.root, t.TempDir(), cv2remote.New(c.client(t, "node-1")))
	require.NoError(t, err)
	t.Cleanup(func() { node.Close() })

	var wg sync.WaitGroup
	var res Result
	var fetchErr, pullErr error
	wg.Go(func() { res, fetchErr = Fetch(ctx, cs, plainResolver(), img.Ref, Options{}) })
	wg.Go(func() { _, pullErr = contentv2test.Pull(ctx, node.CS, img.Ref, contentv2test.PullOptions{}) })
	wg.Wait()
	require.NoError(t, fetchErr)
	require.NoError(t, pullErr)
	for _, d := range img.Descriptors() {
		require.Equal(t, 1, reg.BlobGets()[d.Digest.String()], "%s downloaded once", d.Digest)
		info, err := node.CS.Info(ctx, d.Digest)
		require.NoError(t, err, "the node's containerd lists %s", d.Digest)
		require.Equal(t, d.Size, info.Size)
		b, err := content.ReadBlob(ctx, node.CS, d)
		require.NoError(t, err, "the node reads %s", d.Digest)
		require.Equal(t, d.Digest, digest.FromBytes(b))
	}
	require.ElementsMatch(t, img.Blobs(), res.Digests())
	fetched, _, _ := res.Counts()
	t.Logf("the prefetch downloaded %d of %d blobs, the node the rest", fetched, len(img.Blobs()))
}

// TestFetchSharedLayerOnce: a layer two platforms' manifests share is one
// blob of the result, downloaded once.
func TestFetchSharedLayerOnce(t *testing.T) {
	ctx := context.Background()
	reg := startRegistry(t)
	shared, err := random.Layer(32<<10, types.OCILayer)
	require.NoError(t, err)
	var imgs []v1.Image
	var adds []mutate.IndexAddendum
	for _, arch := range []string{"amd64", "arm64"} {
		own, err := random.Layer(16<<10, types.OCILayer)
		require.NoError(t, err)
		img, err := mutate.AppendLayers(empty.Image, shared, own)
		require.NoError(t, err)
		img, err = mutate.ConfigFile(img, &v1.ConfigFile{Architecture: arch, OS: "linux"})
		require.NoError(t, err)
		imgs = append(imgs, img)
		adds = append(adds, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: arch}}})
	}
	ref, err := name.ParseReference(reg.Host+"/test/shared:v1", name.Insecure)
	require.NoError(t, err)
	require.NoError(t, remote.WriteIndex(ref, mutate.AppendManifests(empty.Index, adds...)))
	reg.ResetCounters()
	cs := newCluster(t).prefetchStore(t, "prefetch-a")

	res, err := Fetch(ctx, cs, plainResolver(), ref.String(), Options{})
	require.NoError(t, err)
	sharedDigest, err := shared.Digest()
	require.NoError(t, err)
	require.Equal(t, 1, reg.BlobGets()[sharedDigest.String()], "the shared layer downloaded once")
	require.Len(t, res.Digests(), 1+2*4-1, "index, 2 × (manifest, config, 2 layers), the shared layer once")
	require.Equal(t, len(res.Digests()), len(slices.Compact(res.Digests())), "each blob once")
	fetched, present, _ := res.Counts()
	require.Equal(t, len(res.Blobs), fetched+present)
}
