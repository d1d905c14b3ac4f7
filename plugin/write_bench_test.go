package plugin_test

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"net"
	"path/filepath"
	"testing"
	"time"

	contentapi "github.com/containerd/containerd/api/services/content/v1"
	"github.com/containerd/containerd/v2/core/content"
	"github.com/containerd/containerd/v2/core/content/proxy"
	"github.com/containerd/containerd/v2/defaults"
	"github.com/containerd/containerd/v2/plugins/services/content/contentserver"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sharedcontent/sharedcontent/contentv2"
	"github.com/sharedcontent/sharedcontent/contentv2/remote"
	"github.com/sharedcontent/sharedcontent/lockclient"
	"github.com/sharedcontent/sharedcontent/lockserver"
	"github.com/sharedcontent/sharedcontent/plugin"
	"github.com/sharedcontent/sharedcontent/refcount"
)

const (
	// benchBlobSize is the blob of BenchmarkProxiedWrite: one layer of
	// the 256 MiB image of `make bench-containerd`.
	benchBlobSize = 256 << 20
	// benchChunk is the size of fetch's writes: content.Copy copies
	// through a 1 MiB buffer (core/content/helpers.go bufPool).
	benchChunk = 1 << 20
)

// BenchmarkProxiedWrite writes a 256 MiB blob in fetch-sized writes, as
// containerd's fetch does (Writer, Status, Writes, Commit), to one
// containerd-mode contentv2 store in three ways, taking turns each
// iteration:
//
//   - direct: the store called in-process, as stock containerd calls its
//     own local store;
//   - proxy: containerd's proxy client (core/content/proxy, dialed as
//     containerd dials a proxy plugin) over a unix socket to the plugin's
//     server (plugin.Listen: content and diff APIs, the follower wrapper,
//     the quiet interceptor, its gRPC options);
//   - proxy-plain: the same client to containerd's contentserver on a
//     grpc.Server with nothing but the message limits: what our server
//     adds or saves against that.
//
// It reports the mean seconds of each and the ratios to direct. Run:
//
//	go test -run '^$' -bench ProxiedWrite -benchtime 5x ./plugin/
func BenchmarkProxiedWrite(b *testing.B) {
	ctx := context.Background()
	dir := b.TempDir()
	cs := benchStore(b, filepath.Join(dir, "root"))

	address := filepath.Join(dir, "run", "sc.sock")
	srv, err := plugin.Listen(address, cs)
	require.NoError(b, err)
	go srv.Serve(ctx)
	b.Cleanup(func() { srv.Stop(ctx) })

	plainAddress := filepath.Join(dir, "run", "plain.sock")
	plain := plainServer(b, plainAddress, cs)
	b.Cleanup(plain.Stop)

	ways := []struct {
		name string
		cs   content.Ingester
	}{
		{"direct", cs},
		{"proxy", containerdProxy(b, address)},
		{"proxy-plain", containerdProxy(b, plainAddress)},
	}
	chunk := make([]byte, benchChunk)
	_, err = rand.Read(chunk)
	require.NoError(b, err)
	took := make([]time.Duration, len(ways))
	b.SetBytes(benchBlobSize * int64(len(ways)))
	b.ResetTimer()
	for i := range b.N {
		for k := range ways {
			w := ways[(i+k)%len(ways)]
			b.StopTimer()
			// A blob of its own each time: a new digest, a new pull lock.
			blob := benchBlob{seed: uint64(i*len(ways) + k), buf: chunk}
			desc := blob.descriptor()
			b.StartTimer()
			start := time.Now()
			benchWrite(b, ctx, w.cs, desc, blob)
			took[(i+k)%len(ways)] += time.Since(start)
			b.StopTimer()
			require.NoError(b, cs.Delete(ctx, desc.Digest))
			b.StartTimer()
		}
	}
	for k, w := range ways {
		b.ReportMetric(took[k].Seconds()/float64(b.N), w.name+"-s/op")
		if k > 0 {
			b.ReportMetric(took[k].Seconds()/took[0].Seconds(), w.name+"/direct")
		}
	}
}

// benchWrite writes data as containerd's fetch does: a Writer with the
// digest in the ref (the metadata store clears it from the descriptor),
// one Status, the writes, Commit.
func benchWrite(b *testing.B, ctx context.Context, cs content.Ingester, desc ocispec.Descriptor, blob benchBlob) {
	ref := fmt.Sprintf("default/1/layer-%s", desc.Digest)
	w, err := cs.Writer(ctx, content.WithRef(ref), content.WithDescriptor(ocispec.Descriptor{Size: desc.Size}))
	require.NoError(b, err)
	defer w.Close()
	st, err := w.Status()
	require.NoError(b, err)
	require.Zero(b, st.Offset)
	require.NoError(b, blob.each(func(p []byte) error {
		_, err := w.Write(p)
		return err
	}))
	require.NoError(b, w.Commit(ctx, desc.Size, desc.Digest))
}

// benchBlob is a blob of benchBlobSize made one fetch-sized chunk at a
// time in buf: random bytes, each chunk stamped with the seed and its
// index, so that every blob is distinct and the process holds no 256 MiB
// of data (whose heap would make its garbage collector run far less
// often than a daemon's).
type benchBlob struct {
	seed uint64
	buf  []byte // random bytes, benchChunk of them
}

// each calls fn with the blob's chunks in order; the chunk is overwritten
// after fn returns.
func (bb benchBlob) each(fn func([]byte) error) error {
	for i, left := uint64(0), benchBlobSize; left > 0; i, left = i+1, left-len(bb.buf) {
		p := bb.buf[:min(len(bb.buf), left)]
		binary.BigEndian.PutUint64(p, bb.seed)
		binary.BigEndian.PutUint64(p[8:], i)
		if err := fn(p); err != nil {
			return err
		}
	}
	return nil
}

func (bb benchBlob) descriptor() ocispec.Descriptor {
	d := digest.SHA256.Digester()
	bb.each(func(p []byte) error { _, err := d.Hash().Write(p); return err })
	return ocispec.Descriptor{MediaType: ocispec.MediaTypeImageLayerGzip, Digest: d.Digest(), Size: benchBlobSize}
}

// benchStore is a containerd-mode store on an embedded coordinator, as the
// daemon runs it.
func benchStore(b *testing.B, root string) content.Store {
	l, err := lockserver.NewCoordinator(lockserver.DefaultConfig(),
		lockserver.Options{Refs: refcount.NewManager(refcount.NewMemoryStorage())})
	require.NoError(b, err)
	b.Cleanup(func() { l.Close() })
	c, err := lockclient.NewEmbedded(l, lockclient.WithNodeID("node-1"))
	require.NoError(b, err)
	cs, err := contentv2.NewStore(root, "node-1", remote.New(c), contentv2.WithStateDir(b.TempDir()))
	require.NoError(b, err)
	b.Cleanup(func() { cs.Close() })
	return cs
}

// containerdProxy is containerd's proxy content client, dialed with the
// options containerd uses for a proxy plugin
// (cmd/containerd/server/server.go getClient).
func containerdProxy(b *testing.B, address string) content.Store {
	conn, err := grpc.NewClient("unix://"+address,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(defaults.DefaultMaxRecvMsgSize)),
		grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(defaults.DefaultMaxSendMsgSize)))
	require.NoError(b, err)
	b.Cleanup(func() { conn.Close() })
	return proxy.NewContentStore(conn)
}

// plainServer serves cs with containerd's contentserver on a grpc.Server
// with only the message limits set.
func plainServer(b *testing.B, address string, cs content.Store) *grpc.Server {
	ln, err := net.Listen("unix", address)
	require.NoError(b, err)
	gs := grpc.NewServer(grpc.MaxRecvMsgSize(plugin.MaxMsgSize), grpc.MaxSendMsgSize(plugin.MaxMsgSize))
	contentapi.RegisterContentServer(gs, contentserver.New(cs))
	go gs.Serve(ln)
	return gs
}
