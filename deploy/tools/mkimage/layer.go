package main

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// binDir is where the binaries live in the image.
const binDir = "usr/local/bin/"

// binaries are the programs every image holds, in the order written.
var binaries = []string{"containerd-sharedcontent", "sharedcontent-lockserver", "sharedcontentctl"}

// layerTar is the image's only layer, uncompressed: the directories down to
// binDir, the binaries of dir, and /tmp (mode 1777, for programs that write
// a temporary file when nothing is mounted there). Owners are 0:0, times
// are mtime, names are in a fixed order.
func layerTar(dir string, mtime time.Time) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	hdr := func(name string, typ byte, mode, size int64) *tar.Header {
		return &tar.Header{
			Typeflag: typ, Name: name, Mode: mode, Size: size,
			ModTime: mtime, Format: tar.FormatPAX,
			// Uid, Gid 0, and no user or group names.
		}
	}
	for _, d := range []string{"tmp/", "usr/", "usr/local/", binDir} {
		mode := int64(0o755)
		if d == "tmp/" {
			mode = 0o1777
		}
		if err := tw.WriteHeader(hdr(d, tar.TypeDir, mode, 0)); err != nil {
			return nil, err
		}
	}
	for _, b := range binaries {
		data, err := os.ReadFile(filepath.Join(dir, b))
		if err != nil {
			return nil, fmt.Errorf("binary %s: %w", b, err)
		}
		if err := tw.WriteHeader(hdr(binDir+b, tar.TypeReg, 0o755, int64(len(data)))); err != nil {
			return nil, err
		}
		if _, err := tw.Write(data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// layer is layerTar as a gzip-compressed OCI layer.
func layer(dir string, mtime time.Time) (v1.Layer, error) {
	b, err := layerTar(dir, mtime)
	if err != nil {
		return nil, err
	}
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(b)), nil
	}, tarball.WithMediaType(types.OCILayer), tarball.WithCompressedCaching)
}
