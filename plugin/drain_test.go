package plugin_test

import (
	"bytes"
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/containerd/containerd/v2/core/content"
	"github.com/containerd/containerd/v2/core/content/proxy"
	"github.com/containerd/containerd/v2/plugins/content/local"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sharedcontent/sharedcontent/plugin"
)

// serveLocal serves a local store on a socket in a temp dir until the
// test ends, and returns the server and the socket's address.
func serveLocal(t *testing.T) (*plugin.Server, string) {
	dir := t.TempDir()
	cs, err := local.NewStore(filepath.Join(dir, "root"))
	require.NoError(t, err)
	address := filepath.Join(dir, "sc.sock")
	srv, err := plugin.Listen(address, cs)
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- srv.Serve(context.Background()) }()
	t.Cleanup(func() { srv.Stop(context.Background()); require.NoError(t, <-done) })
	return srv, address
}

// TestDrain: a draining server still serves a writer open before the
// drain and one opened during it (a pull's next blob), and is drained only
// once the last call has been over for the quiet time; a drain whose
// context ends first says so.
func TestDrain(t *testing.T) {
	srv, address := serveLocal(t)
	client := dial(t, address)
	ctx := context.Background()

	data := bytes.Repeat([]byte("a"), 1<<20)
	desc := ocispec.Descriptor{Digest: digest.FromBytes(data), Size: int64(len(data))}
	w, err := client.Writer(ctx, content.WithRef("in-flight"), content.WithDescriptor(desc))
	require.NoError(t, err)
	_, err = w.Write(data[:1<<19])
	require.NoError(t, err)

	// A drain whose context ends while the writer is open.
	cctx, cancel := context.WithCancel(ctx)
	cancelled := make(chan error, 1)
	go func() { cancelled <- srv.Drain(cctx, time.Hour) }()
	cancel()
	require.ErrorIs(t, <-cancelled, context.Canceled)

	const quiet = 200 * time.Millisecond
	drained := make(chan time.Time, 1)
	go func() {
		require.NoError(t, srv.Drain(ctx, quiet))
		drained <- time.Now()
	}()
	// A blob opened after the drain began is served too.
	other := bytes.Repeat([]byte("b"), 1<<10)
	require.NoError(t, content.WriteBlob(ctx, client, "opened-while-draining", bytes.NewReader(other),
		ocispec.Descriptor{Digest: digest.FromBytes(other), Size: int64(len(other))}))
	// The writer's stream is in flight from Writer to Close, so the drain
	// ends no sooner than the quiet time after this.
	finishing := time.Now()
	_, err = w.Write(data[1<<19:])
	require.NoError(t, err)
	require.NoError(t, w.Commit(ctx, desc.Size, desc.Digest))
	require.NoError(t, w.Close())
	at := <-drained
	require.False(t, at.Before(finishing.Add(quiet)), "drained %v after the writer finished, before the quiet time %v", at.Sub(finishing), quiet)
	got, err := content.ReadBlob(ctx, client, desc)
	require.NoError(t, err)
	require.Equal(t, data, got, "the blob written across the drain")
}

// TestDrainWithoutClients: with no call in flight and no client connected
// (containerd stopped first) a drain is over at once, whatever its quiet
// time.
func TestDrainWithoutClients(t *testing.T) {
	srv, address := serveLocal(t)
	conn, err := grpc.NewClient("unix://"+address, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	_, err = proxy.NewContentStore(conn).ListStatuses(context.Background())
	require.NoError(t, err)

	ctx, cancel := context.WithCancel(context.Background())
	blocked := make(chan error, 1)
	go func() { blocked <- srv.Drain(ctx, time.Hour) }()
	require.NoError(t, conn.Close())
	require.NoError(t, <-blocked, "the drain ended when the last client went")
	cancel()
}
