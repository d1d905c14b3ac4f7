package contentv2_test

import (
	"bytes"
	"context"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/containerd/containerd/v2/core/content"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"github.com/stretchr/testify/require"

	"github.com/sharedcontent/sharedcontent/contentv2"
	"github.com/sharedcontent/sharedcontent/lockclient"
	"github.com/sharedcontent/sharedcontent/lockserver"
)

func blob(s string) ([]byte, ocispec.Descriptor) {
	b := bytes.Repeat([]byte(s), 1000)
	return b, ocispec.Descriptor{MediaType: ocispec.MediaTypeImageLayer, Digest: digest.FromBytes(b), Size: int64(len(b))}
}

func blobFile(root string, d digest.Digest) string {
	return filepath.Join(root, "blobs", d.Algorithm().String(), d.Encoded())
}

// TestUnreachableCoordinator: with the lock server down, a write proceeds
// (fail-open) and a delete removes nothing (fail-closed); once the server
// is up, the write's reference is recorded.
func TestUnreachableCoordinator(t *testing.T) {
	// Reserve a port, then free it: nothing listens there for now.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	ln.Close()

	client, err := lockclient.New("http://"+addr, lockclient.WithNodeID("node-1"),
		lockclient.WithMaxRetries(1), lockclient.WithRetryInterval(10*time.Millisecond))
	require.NoError(t, err)
	root := t.TempDir()
	cs, err := contentv2.NewStore(root, "node-1", client, contentv2.WithRefRetryInterval(50*time.Millisecond))
	require.NoError(t, err)
	defer cs.Close()
	ctx := context.Background()

	data, desc := blob("fail-open ")
	start := time.Now()
	require.NoError(t, content.WriteBlob(ctx, cs, "layer-"+desc.Digest.String(), bytes.NewReader(data), desc))
	require.FileExists(t, blobFile(root, desc.Digest), "the write went ahead")

	require.NoError(t, cs.Delete(ctx, desc.Digest), "an unreachable coordinator is not a GC error")
	require.FileExists(t, blobFile(root, desc.Digest), "nothing is deleted without the coordinator")
	other, odesc := blob("second ")
	require.NoError(t, content.WriteBlob(ctx, cs, "layer-"+odesc.Digest.String(), bytes.NewReader(other), odesc))
	t.Logf("two writes and a delete against a dead coordinator took %s", time.Since(start))

	// The coordinator comes up on that address; the pending reference lands.
	srv, err := lockserver.OpenServer(lockserver.ServerConfig{Config: lockserver.DefaultConfig(), DataDir: t.TempDir()})
	require.NoError(t, err)
	ln, err = net.Listen("tcp", addr)
	require.NoError(t, err)
	go srv.Serve(ln)
	defer srv.Shutdown(context.Background())
	require.Eventually(t, func() bool {
		refs, err := srv.Locker.Refs(ctx, odesc.Digest.String())
		return err == nil && refs.Count == 1 && refs.Nodes[0] == "node-1"
	}, 10*time.Second, 20*time.Millisecond, "the reference made while the coordinator was down is recorded")
}

// lostLease wraps a coordinator whose unlocks find the lease gone, as after
// a coordinator restart or a lease that expired during a long download.
type lostLease struct{ contentv2.Coordinator }

func (lostLease) Unlock(context.Context, *lockclient.Lease, bool, error) error {
	return lockclient.ErrNotHolder
}

func TestLostLeaseStillRecordsReference(t *testing.T) {
	l, err := lockserver.NewLocker(lockserver.DefaultConfig(), lockserver.Options{Refs: newRefs()})
	require.NoError(t, err)
	defer l.Close()
	client, err := lockclient.NewEmbedded(l, lockclient.WithNodeID("node-1"))
	require.NoError(t, err)
	root := t.TempDir()
	cs, err := contentv2.NewStore(root, "node-1", lostLease{client})
	require.NoError(t, err)
	defer cs.Close()
	ctx := context.Background()
	data, desc := blob("lost lease ")
	require.NoError(t, content.WriteBlob(ctx, cs, "layer-"+desc.Digest.String(), bytes.NewReader(data), desc))
	refs, err := l.Refs(ctx, desc.Digest.String())
	require.NoError(t, err)
	require.Equal(t, []string{"node-1"}, refs.Nodes, "the download is kept and referenced")
	_, err = os.Stat(blobFile(root, desc.Digest))
	require.NoError(t, err)
}
