package scale

import (
	"context"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sharedcontent/sharedcontent/lockserver/lockservertest"
)

// TestFetchDownloadsOnce: nodes that are contentv2 stores over one shared
// root, fetching the same blob at once as containerd does (fetch.go),
// download it once between them; every node then reads it, and what the
// stores did is counted: one writer acquired the lock, the others
// followed it and shared the blob, none went ahead without the
// coordinator.
func TestFetchDownloadsOnce(t *testing.T) {
	ts := lockservertest.Start(t)
	cfg := Config{ShortConns: DefaultShortConns, Download: 50 * time.Millisecond}
	nodes, err := newNodes(4, cfg, ts.URL(), &answers{})
	require.NoError(t, err)
	t.Cleanup(func() { closeNodes(nodes) })
	dir := t.TempDir()
	root, state := filepath.Join(dir, "root"), filepath.Join(dir, "state")
	for _, n := range nodes {
		require.NoError(t, n.openStore(root, state, true))
		t.Cleanup(n.closeStore)
	}
	img := newImage(1, 4096)
	for _, n := range nodes {
		n.img.Store(img)
	}

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	for _, n := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			require.True(t, n.pullBlob(ctx, cfg, img, 0), "node %s", n.id)
		}()
	}
	wg.Wait()
	require.Equal(t, int64(1), img.downloads[0].Load(), "downloads of the blob")
	for _, n := range nodes {
		ra, err := n.store.ReaderAt(ctx, img.descs[0])
		require.NoError(t, err, "node %s reads the blob", n.id)
		b := make([]byte, ra.Size())
		_, err = ra.ReadAt(b, 0)
		require.NoError(t, err)
		require.NoError(t, ra.Close())
		require.Equal(t, img.data[0], b, "node %s", n.id)
	}
	a, err := acts(nodes)
	require.NoError(t, err)
	require.Equal(t, 1.0, a.Counters["writers{acquired}"], "what the stores did: %s", a)
	require.Zero(t, a.Uncoordinated(), "what the stores did: %s", a)
	require.Zero(t, a.FailedCalls, "calls without an answer: %s", a.FirstFailure)
	require.Equal(t, float64(len(nodes)-1), a.Counters["follows{shared}"]+a.Counters["writers{skipped}"], "the others used the holder's blob: %s", a)
}
