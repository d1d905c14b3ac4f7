package plugin_test

import (
	"bytes"
	"context"
	"net"
	"os"
	"path/filepath"
	"testing"

	"github.com/containerd/containerd/v2/core/content"
	"github.com/containerd/containerd/v2/core/content/proxy"
	"github.com/containerd/containerd/v2/plugins/content/local"
	"github.com/containerd/errdefs"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sharedcontent/sharedcontent/plugin"
)

func dial(t *testing.T, address string) content.Store {
	conn, err := grpc.NewClient("unix://"+address,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(plugin.MaxMsgSize), grpc.MaxCallSendMsgSize(plugin.MaxMsgSize)))
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	return proxy.NewContentStore(conn)
}

// TestServeThroughContainerdProxy writes and reads a blob through
// containerd's own proxy content client, as containerd's proxy_plugins do.
func TestServeThroughContainerdProxy(t *testing.T) {
	dir := t.TempDir()
	cs, err := local.NewStore(filepath.Join(dir, "root"))
	require.NoError(t, err)
	address := filepath.Join(dir, "run", "sc.sock")
	srv, err := plugin.Listen(address, cs)
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- srv.Serve(context.Background()) }()

	fi, err := os.Stat(filepath.Dir(address))
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o700), fi.Mode().Perm(), "socket directory")

	client := dial(t, address)
	ctx := context.Background()
	data := bytes.Repeat([]byte("sharedcontent"), 1<<20) // 13 MiB: more than gRPC's 4 MiB default
	desc := ocispec.Descriptor{Digest: digest.FromBytes(data), Size: int64(len(data))}
	require.NoError(t, content.WriteBlob(ctx, client, "ref-1", bytes.NewReader(data), desc))
	got, err := content.ReadBlob(ctx, client, desc)
	require.NoError(t, err)
	require.Equal(t, desc.Digest, digest.FromBytes(got))
	_, err = client.Info(ctx, digest.FromString("absent"))
	require.True(t, errdefs.IsNotFound(err), "error classes survive gRPC: %v", err)

	// A second daemon on the same socket is refused while the first serves.
	_, err = plugin.Listen(address, cs)
	require.ErrorContains(t, err, "served by another process")

	srv.Stop(ctx)
	require.NoError(t, <-done)
	_, err = os.Stat(address)
	require.ErrorIs(t, err, os.ErrNotExist, "socket removed on stop")
}

func TestStaleSocketIsReplaced(t *testing.T) {
	dir := t.TempDir()
	address := filepath.Join(dir, "sc.sock")
	// A socket file nobody serves, as a crashed daemon leaves behind.
	ln, err := net.Listen("unix", address)
	require.NoError(t, err)
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	ln.Close()
	require.FileExists(t, address)

	cs, err := local.NewStore(filepath.Join(dir, "root"))
	require.NoError(t, err)
	srv, err := plugin.Listen(address, cs)
	require.NoError(t, err)
	srv.Stop(context.Background())

	require.NoError(t, os.WriteFile(address, []byte("not a socket"), 0o600))
	_, err = plugin.Listen(address, cs)
	require.ErrorContains(t, err, "not a socket")
}
