package plugin_test

import (
	"bytes"
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/containerd/containerd/v2/core/content"
	"github.com/containerd/errdefs"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"github.com/stretchr/testify/require"

	"github.com/sharedcontent/sharedcontent/contentv2"
	"github.com/sharedcontent/sharedcontent/contentv2/remote"
	"github.com/sharedcontent/sharedcontent/internal/testutil/freezefs"
	"github.com/sharedcontent/sharedcontent/lockclient"
	"github.com/sharedcontent/sharedcontent/lockserver/lockservertest"
	"github.com/sharedcontent/sharedcontent/plugin"
)

// TestHungRootThroughContainerdProxy: containerd's proxy content client
// does not hang on a plugin whose shared root stops answering. Its calls
// fail within the storage timeout as unavailable (the class survives
// gRPC, so containerd retries a writer rather than taking the blob for
// absent), and work again once the root answers.
func TestHungRootThroughContainerdProxy(t *testing.T) {
	// The storage timeout bounds every call on the root, the healthy ones
	// before the freeze too: long enough that a loaded machine's healthy
	// write stays within it.
	const timeout = 2 * time.Second
	fs := freezefs.Mount(t, t.TempDir())
	coord := lockservertest.Start(t)
	c, err := lockclient.New(coord.URL(), lockclient.WithNodeID("node-1"))
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	store, err := contentv2.NewStore(fs.Dir, "node-1", remote.New(c), contentv2.WithStateDir(t.TempDir()),
		contentv2.WithStorageTimeout(timeout))
	require.NoError(t, err)
	t.Cleanup(func() { fs.Thaw(); store.Close() })
	address := filepath.Join(t.TempDir(), "sc.sock")
	srv, err := plugin.Listen(address, store)
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- srv.Serve(context.Background()) }()
	t.Cleanup(func() { fs.Thaw(); srv.Stop(context.Background()); <-done })

	client := dial(t, address)
	ctx := context.Background()
	data := bytes.Repeat([]byte("hung root "), 1000)
	desc := ocispec.Descriptor{Digest: digest.FromBytes(data), Size: int64(len(data))}
	require.NoError(t, content.WriteBlob(ctx, client, "ref-1", bytes.NewReader(data), desc))

	fs.Freeze()
	for _, call := range []struct {
		what string
		fn   func() error
	}{
		{"info", func() error { _, err := client.Info(ctx, desc.Digest); return err }},
		{"read", func() error { _, err := content.ReadBlob(ctx, client, desc); return err }},
	} {
		start := time.Now()
		errc := make(chan error, 1)
		go func() { errc <- call.fn() }()
		select {
		case err = <-errc:
		case <-time.After(20 * timeout):
			fs.Thaw()
			t.Fatalf("%s through containerd's proxy: no answer while the root was frozen", call.what)
		}
		took := time.Since(start)
		t.Logf("%s through containerd's proxy: failed after %v (deadline %v): %v", call.what, took.Round(time.Millisecond), timeout, err)
		require.True(t, errdefs.IsUnavailable(err), "%s: %v", call.what, err)
		require.ErrorContains(t, err, "not answering within "+timeout.String())
		// Bounded by the watchdog above (the old code hung until it);
		// no tighter wall-clock bound, which a loaded machine breaks, and
		// no lower one: once the root is known not to answer, a call
		// fails at once.
	}
	fs.Thaw()
	require.Eventually(t, func() bool { return store.(contentv2.StallReporter).RootStalled() == nil }, 20*timeout, timeout/10)
	got, err := content.ReadBlob(ctx, client, desc)
	require.NoError(t, err)
	require.Equal(t, desc.Digest, digest.FromBytes(got))
}
