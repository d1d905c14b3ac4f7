package e2e

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"hash/crc32"
	"io"
	"runtime"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/sharedcontent/sharedcontent/internal/testutil/registry"
)

// testImage is an image pushed to the test registry.
type testImage struct {
	Ref      string // host/repo:tag
	Manifest v1.Descriptor
	Config   v1.Descriptor
	Layers   []v1.Descriptor
}

// blobs returns the digests fetched through /v2/<repo>/blobs/: the config
// and the layers (the manifest comes through /manifests/).
func (i testImage) blobs() []string {
	out := []string{i.Config.Digest.String()}
	for _, l := range i.Layers {
		out = append(out, l.Digest.String())
	}
	return out
}

// all returns every digest of the image, manifest first.
func (i testImage) all() []string { return append([]string{i.Manifest.Digest.String()}, i.blobs()...) }

// size is the sum of the sizes of config and layers.
func (i testImage) size() int64 {
	n := i.Config.Size
	for _, l := range i.Layers {
		n += l.Size
	}
	return n
}

// pushImage generates an OCI image for this host's platform whose layers
// are tar+gzip of one file of layerSizes[i] random bytes (so no two layers
// are alike), pushes it as repo:v1 and resets the registry's counters.
func pushImage(t *testing.T, reg *registry.Registry, repo string, layerSizes ...int64) testImage {
	t.Helper()
	var layers []*memLayer
	for i, size := range layerSizes {
		l, err := randomLayer(fmt.Sprintf("layer%d.bin", i), size)
		if err != nil {
			t.Fatal(err)
		}
		layers = append(layers, l)
	}
	return pushLayers(t, reg, repo, layers...)
}

// pushLayers pushes an image of the given layers as repo:v1 (images pushed
// with some of the same layers share those blobs) and resets the
// registry's counters.
func pushLayers(t *testing.T, reg *registry.Registry, repo string, layers ...*memLayer) testImage {
	t.Helper()
	start := time.Now()
	img := empty.Image
	img = mutate.MediaType(img, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	for _, l := range layers {
		var err error
		if img, err = mutate.AppendLayers(img, l); err != nil {
			t.Fatal(err)
		}
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", runtime.GOARCH
	cf.Config.Cmd = []string{"/layer0.bin"}
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		t.Fatal(err)
	}
	ref, err := name.ParseReference(reg.Host+"/"+repo+":v1", name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := remote.Write(ref, img, remote.WithContext(ctx)); err != nil {
		t.Fatalf("push %s: %v", ref, err)
	}
	out := testImage{Ref: ref.String()}
	m, err := img.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := img.RawManifest()
	dgst, _ := img.Digest()
	out.Manifest = v1.Descriptor{MediaType: m.MediaType, Digest: dgst, Size: int64(len(raw))}
	out.Config, out.Layers = m.Config, m.Layers
	reg.ResetCounters()
	t.Logf("e2e: pushed %s: %d layers, %.1f MB, in %.1fs", out.Ref, len(out.Layers), mb(out.size()), time.Since(start).Seconds())
	return out
}

// memLayer is a tar+gzip layer held in memory.
type memLayer struct {
	gz             []byte
	digest, diffID v1.Hash
}

// randomLayer builds a layer holding one file of size random bytes. The
// gzip stream uses stored blocks: random data does not compress, and
// compress/flate is slow under the race detector.
func randomLayer(file string, size int64) (*memLayer, error) {
	var tarball bytes.Buffer
	tarball.Grow(int(size) + 4096)
	tw := tar.NewWriter(&tarball)
	if err := tw.WriteHeader(&tar.Header{Name: file, Size: size, Mode: 0o644, Typeflag: tar.TypeReg,
		ModTime: time.Unix(0, 0)}); err != nil {
		return nil, err
	}
	data := make([]byte, size)
	if _, err := rand.Read(data); err != nil {
		return nil, err
	}
	if _, err := tw.Write(data); err != nil {
		return nil, err
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	gz := gzipStored(tarball.Bytes())
	diff, sum := sha256.Sum256(tarball.Bytes()), sha256.Sum256(gz)
	return &memLayer{
		gz:     gz,
		digest: v1.Hash{Algorithm: "sha256", Hex: hex.EncodeToString(sum[:])},
		diffID: v1.Hash{Algorithm: "sha256", Hex: hex.EncodeToString(diff[:])},
	}, nil
}

// gzipStored wraps data in a gzip member (RFC 1952) whose deflate stream is
// stored blocks (RFC 1951 §3.2.4) of at most 65535 bytes.
func gzipStored(data []byte) []byte {
	const maxBlock = 65535
	out := make([]byte, 0, len(data)+(len(data)/maxBlock+1)*5+18)
	// ID1 ID2, CM=deflate, FLG=0, MTIME=0, XFL=0, OS=unknown
	out = append(out, 0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff)
	for off := 0; ; {
		n := min(len(data)-off, maxBlock)
		final := byte(0)
		if off+n == len(data) {
			final = 1 // BFINAL=final, BTYPE=00, then padding to the byte
		}
		out = append(out, final, byte(n), byte(n>>8), byte(^n), byte(^n>>8))
		out = append(out, data[off:off+n]...)
		off += n
		if final == 1 {
			break
		}
	}
	out = binary.LittleEndian.AppendUint32(out, crc32.ChecksumIEEE(data))
	return binary.LittleEndian.AppendUint32(out, uint32(len(data)))
}

func (l *memLayer) Digest() (v1.Hash, error) { return l.digest, nil }
func (l *memLayer) DiffID() (v1.Hash, error) { return l.diffID, nil }
func (l *memLayer) Size() (int64, error)     { return int64(len(l.gz)), nil }
func (l *memLayer) MediaType() (types.MediaType, error) {
	return types.OCILayer, nil
}
func (l *memLayer) Compressed() (io.ReadCloser, error) {
	return io.NopCloser(bytes.NewReader(l.gz)), nil
}
func (l *memLayer) Uncompressed() (io.ReadCloser, error) {
	zr, err := gzip.NewReader(bytes.NewReader(l.gz))
	if err != nil {
		return nil, err
	}
	return zr, nil
}

// mb converts bytes to (decimal) megabytes for reports.
func mb(n int64) float64 { return float64(n) / 1e6 }

// getsOf returns, for each digest, how many GETs the registry served.
func getsOf(reg *registry.Registry, dgsts []string) (per map[string]int, total int) {
	all := reg.BlobGets()
	per = map[string]int{}
	for _, d := range dgsts {
		per[d] = all[d]
		total += all[d]
	}
	return per, total
}

// short abbreviates a digest for messages.
func short(d string) string {
	if len(d) > 19 {
		return d[:19]
	}
	return d
}
