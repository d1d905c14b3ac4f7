package e2e

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"github.com/sharedcontent/sharedcontent/internal/testutil/registry"
	"github.com/stretchr/testify/require"
)

// writeOCIArchive writes an OCI image layout tarball of a random image
// (layers of layerSize bytes) named name, as `ctr images export` writes
// one, to path, and returns the digests of its blobs.
func writeOCIArchive(t *testing.T, path, name string, layers int, layerSize int64) []string {
	t.Helper()
	img, err := random.Image(layerSize, int64(layers))
	require.NoError(t, err)
	// This machine's platform, so that the import keeps and unpacks it.
	cf, err := img.ConfigFile()
	require.NoError(t, err)
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", runtime.GOARCH
	img, err = mutate.ConfigFile(img, cf)
	require.NoError(t, err)
	blobs, err := registry.RawBlobs(img)
	require.NoError(t, err)
	manifest := blobs[0]
	mt, err := img.MediaType()
	require.NoError(t, err)
	index := ocispec.Index{
		MediaType: ocispec.MediaTypeImageIndex,
		Manifests: []ocispec.Descriptor{{MediaType: string(mt), Digest: digest.FromBytes(manifest), Size: int64(len(manifest)),
			Platform:    &ocispec.Platform{OS: "linux", Architecture: runtime.GOARCH},
			Annotations: map[string]string{"io.containerd.image.name": name, ocispec.AnnotationRefName: "v1"}}},
	}
	index.SchemaVersion = 2
	indexJSON, err := json.Marshal(index)
	require.NoError(t, err)

	f, err := os.Create(path)
	require.NoError(t, err)
	defer f.Close()
	tw := tar.NewWriter(f)
	add := func(name string, b []byte) {
		require.NoError(t, tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(b)), Typeflag: tar.TypeReg}))
		_, err := io.Copy(tw, bytes.NewReader(b))
		require.NoError(t, err)
	}
	add(ocispec.ImageLayoutFile, []byte(`{"imageLayoutVersion":"1.0.0"}`))
	add(ocispec.ImageIndexFile, indexJSON)
	var dgsts []string
	for _, b := range blobs {
		d := digest.FromBytes(b)
		dgsts = append(dgsts, d.String())
		add("blobs/sha256/"+d.Encoded(), b)
	}
	require.NoError(t, tw.Close())
	require.NoError(t, f.Close())
	return dgsts
}

// requireListedReadable reads back, with `ctr content get`, every blob each
// node's containerd lists (`ctr content ls`), and returns how many it read.
func requireListedReadable(t *testing.T, nodes []*node) int {
	t.Helper()
	reads := 0
	for _, n := range nodes {
		list, err := n.contentList()
		require.NoError(t, err)
		for _, d := range list {
			got, _, err := n.contentDigest(d)
			require.NoError(t, err, "%s lists %s: ctr content get", n.id, short(d))
			require.Equal(t, d, got, "%s: content get %s", n.id, short(d))
			reads++
		}
	}
	return reads
}

// TestImportKeepsBlobs: `ctr images import` of an OCI archive on two nodes
// (how air-gapped clusters preload images; containerd's importer opens
// every writer without a digest), then the reaper with a short grace runs
// pass after pass. Every blob the nodes' containerd lists must still read
// back with `ctr content get`, and both nodes must be the blobs'
// references at the coordinator.
//
// Before, only blobs whose writer carried a digest were referenced: the
// reaper reclaimed the imported layers as orphans while `ctr images check`
// still called the image complete.
func TestImportKeepsBlobs(t *testing.T) {
	needCtl(t)
	c := newFaultCluster(t, faultOpts{
		lockServerArgs: []string{"--reap-grace", reapGrace.String()},
		pluginArgs: func(int) []string {
			return []string{"--reap-interval", reapInterval.String(), "--reap-grace", reapGrace.String()}
		},
	})
	importers := c.nodes[:2]
	const name = "example.com/e2e/import:v1"
	archive := filepath.Join(c.e.path("import"), "image.tar")
	require.NoError(t, os.MkdirAll(filepath.Dir(archive), 0o755))
	blobs := writeOCIArchive(t, archive, name, 2, faultLayer)
	for _, n := range importers {
		out, err := n.ctr(2*time.Minute, "images", "import", archive)
		require.NoError(t, err, "ctr images import on %s:\n%s", n.id, out)
	}
	imported := time.Now()
	c.ls.waitSynced(t, nodeIDs(c.nodes), syncTimeout)

	// Every imported blob is older than the reaper's grace once the grace
	// has passed since the imports. Passes log when they end: of 2 more
	// after that, the second began after it.
	waitFor(t, "the reaper's grace since the imports", reclaimTimeout, func() (bool, error) {
		return time.Since(imported) > reapGrace, nil
	})
	before, err := reaperPasses(c.nodes)
	require.NoError(t, err)
	waitFor(t, "reaper passes after the grace", reclaimTimeout, func() (bool, error) {
		p, err := reaperPasses(c.nodes)
		return p >= before+2, err
	})

	reads := requireListedReadable(t, importers)
	for _, d := range blobs {
		require.True(t, sharedHas(c.shared, d), "%s in the shared blobs/ after the reaper", short(d))
		got, err := c.ls.refs(d)
		require.NoError(t, err)
		require.Equal(t, sorted(nodeIDs(importers)), got, "references of %s", short(d))
	}
	for _, n := range importers {
		require.Contains(t, n.checkLine(name), "complete", "%s: ctr images check", n.id)
	}
	report(t, "import: `ctr images import` of a %d-blob OCI archive (%.1f MB layers) on 2 nodes, 2 reaper passes after the grace (interval %v, grace %v): %d/%d listed blobs read back, every blob referenced by both",
		len(blobs), mb(2*faultLayer), reapInterval, reapGrace, reads, reads)
}
