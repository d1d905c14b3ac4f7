package contentv2_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"net"
	"testing"

	"github.com/containerd/containerd/v2/core/content"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/sharedcontent/sharedcontent/contentv2"
	"github.com/sharedcontent/sharedcontent/contentv2/remote"
	"github.com/sharedcontent/sharedcontent/lockclient"
	"github.com/sharedcontent/sharedcontent/lockserver"
	"github.com/sharedcontent/sharedcontent/lockserver/httpserver"
)

// BenchmarkCoordinatedPull is one node pulling distinct 4 KiB blobs the way
// containerd's fetch does (Writer, Write, Commit, then Info), against a real
// coordinator on loopback with its bbolt database on disk: the per-blob cost
// of coordination (lock, reference, unlock, and the node's journal write).
func BenchmarkCoordinatedPull(b *testing.B) {
	srv, err := httpserver.Open(httpserver.Config{Config: lockserver.DefaultConfig(), DataDir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	go srv.Serve(ln)
	defer srv.Shutdown(context.Background())
	client, err := lockclient.New("http://"+ln.Addr().String(), lockclient.WithNodeID("node-1"))
	if err != nil {
		b.Fatal(err)
	}
	defer client.Close()
	cs := newBenchStore(b, b.TempDir(), client)
	defer cs.Close()
	ctx := context.Background()
	data := make([]byte, 4096)
	pull := func(i int) {
		binary.LittleEndian.PutUint64(data, uint64(i))
		desc := ocispec.Descriptor{MediaType: ocispec.MediaTypeImageLayer, Digest: digest.FromBytes(data), Size: int64(len(data))}
		if err := content.WriteBlob(ctx, cs, "layer-"+desc.Digest.String(), bytes.NewReader(data), desc); err != nil {
			b.Fatal(err)
		}
		if _, err := cs.Info(ctx, desc.Digest); err != nil {
			b.Fatal(err)
		}
	}
	pull(-1) // the session starts and the journal syncs outside the timing
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		pull(i)
	}
}

func newBenchStore(b *testing.B, root string, client *lockclient.Client) contentv2.Store {
	cs, err := contentv2.NewStore(root, "node-1", remote.New(client), contentv2.WithStateDir(b.TempDir()))
	if err != nil {
		b.Fatal(err)
	}
	return cs
}
