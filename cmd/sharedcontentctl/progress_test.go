package main

import (
	"bytes"
	"os"
	"strings"
	"testing"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"github.com/stretchr/testify/require"

	"github.com/sharedcontent/sharedcontent/internal/prefetch"
)

// TestProgressBar: on a terminal the bar is redrawn in place with the
// bytes, the blobs done of those started and the rate, and ends its line.
func TestProgressBar(t *testing.T) {
	var out bytes.Buffer
	p := &progress{out: &out, tty: true}
	layer := ocispec.Descriptor{MediaType: ocispec.MediaTypeImageLayerGzip, Digest: digest.FromString("l"), Size: 4 << 20}
	p.event(prefetch.Event{Kind: prefetch.Started, Desc: layer})
	p.event(prefetch.Event{Kind: prefetch.Wrote, Desc: layer, Bytes: 2 << 20})
	p.draw()
	require.Contains(t, out.String(), "\r[===============               ] 2.0 MiB / 4.0 MiB  0/1 blobs", "half the bar")
	p.event(prefetch.Event{Kind: prefetch.Wrote, Desc: layer, Bytes: 2 << 20})
	p.event(prefetch.Event{Kind: prefetch.Done, Desc: layer, Blob: prefetch.Blob{Digest: layer.Digest.String(), Size: layer.Size, Fetched: true}})
	p.finish()
	last := out.String()[strings.LastIndex(out.String(), "\r"):]
	require.Contains(t, last, "[==============================] 4.0 MiB / 4.0 MiB  1/1 blobs")
	require.Contains(t, last, "/s")
	require.True(t, strings.HasSuffix(out.String(), "\n"))
	require.NotContains(t, out.String(), layer.Digest.String(), "no per-blob lines on a terminal")
	require.False(t, isTerminal(&out), "a buffer is no terminal")
	f, err := os.CreateTemp(t.TempDir(), "out")
	require.NoError(t, err)
	defer f.Close()
	require.False(t, isTerminal(f), "a file is no terminal")
}
