package contentv2

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"
	"github.com/stretchr/testify/require"
)

// TestHolderOffset: a follower finds its holder's ingest by the digest its
// ref names, never its own node's, and the one written last when another
// node's (left by a crash) names it too; after that it reads the holder's
// length at each look. A scan that found nothing is not repeated within
// progressRescan; an ingest that goes away keeps the last length known
// and the next look scans again. RootIngests lists every node's ingests.
func TestHolderOffset(t *testing.T) {
	root := t.TempDir()
	s := fakeStore(t, newFakeCluster(longTTL), root, "node-1")
	dgst := digest.FromString("followed")
	ctx := context.Background()
	ingest := func(dir, nref string, size int, mtime time.Time) string {
		t.Helper()
		p := filepath.Join(root, "ingest", dir)
		require.NoError(t, os.MkdirAll(p, 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(p, "ref"), []byte(nref), 0o644))
		data := filepath.Join(p, "data")
		require.NoError(t, os.WriteFile(data, make([]byte, size), 0o644))
		require.NoError(t, os.Chtimes(data, mtime, mtime))
		return p
	}
	var p holderProgress
	offset := func() int64 {
		t.Helper()
		n, _ := s.holderOffset(ctx, &p, dgst)
		return n
	}

	require.Zero(t, offset(), "no ingest yet")
	now := time.Now()
	ingest("own", "node-1/default/1/layer-"+dgst.String(), 99, now)
	ingest("stale", "node-9/default/4/layer-"+dgst.String(), 10, now.Add(-time.Hour))
	holder := ingest("holder", "node-2/default/7/layer-"+dgst.String(), 20, now)
	ingest("other", "node-2/default/8/layer-"+digest.FromString("other").String(), 50, now)
	require.False(t, p.scanned.IsZero(), "the scan that found nothing is remembered")
	p.scanned = time.Now().Add(time.Hour) // within progressRescan of it, however slow this machine
	require.Zero(t, offset(), "no scan again within progressRescan of one that found nothing")

	p.scanned = time.Time{} // as if progressRescan had passed
	require.Equal(t, int64(20), offset(), "the holder's: not this node's, not the stale one, not another blob's")
	f, err := os.OpenFile(filepath.Join(holder, "data"), os.O_APPEND|os.O_WRONLY, 0)
	require.NoError(t, err)
	_, err = f.Write(make([]byte, 12))
	require.NoError(t, err)
	require.NoError(t, f.Close())
	require.Equal(t, int64(32), offset(), "the holder's length at each look")

	require.NoError(t, os.RemoveAll(holder)) // committed
	require.Equal(t, int64(32), offset(), "the last length known")
	require.Empty(t, p.data, "the next look scans again")

	all, err := RootIngests(root)
	require.NoError(t, err)
	nodes := map[string]int64{}
	for _, in := range all {
		nodes[in.Node+" "+in.Digest.String()] = in.Offset
	}
	require.Equal(t, map[string]int64{
		"node-1 " + dgst.String():                       99,
		"node-9 " + dgst.String():                       10,
		"node-2 " + digest.FromString("other").String(): 50,
	}, nodes)
}
