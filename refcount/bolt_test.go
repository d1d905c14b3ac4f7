package refcount_test

import (
	"context"
	"fmt"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/containerd/errdefs"
	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"

	"github.com/sharedcontent/sharedcontent/refcount"
	"github.com/sharedcontent/sharedcontent/refcount/storagetest"
)

// openBolt opens the bolt storage at path and closes it when t ends.
func openBolt(t testing.TB, path string) *refcount.BoltStorage {
	t.Helper()
	s, err := refcount.OpenBoltStorage(path)
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	return s
}

func newBoltStorage(t *testing.T) refcount.Storage {
	return openBolt(t, filepath.Join(t.TempDir(), "refcount.db"))
}

func TestBoltStorage(t *testing.T) {
	storagetest.Run(t, newBoltStorage)
}

func TestBoltPersistence(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "refcount.db")
	s := openBolt(t, path)
	require.NoError(t, s.Set(ctx, "r1", refcount.New("b", "a")))
	require.NoError(t, s.Set(ctx, "r2", refcount.New("c")))
	require.NoError(t, s.Delete(ctx, "r2"))
	require.NoError(t, s.PutUint64(ctx, "fence", 42))
	at := time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)
	require.NoError(t, s.Commit(ctx, new(refcount.Batch).
		PutDeleting("r3", refcount.DeleteMarker{Node: "a", Fence: 9, Expires: at}).
		PutDeleted("r4", refcount.DeleteCompletion{Node: "b", At: at})))
	require.NoError(t, s.Close())

	s = openBolt(t, path)
	rc, err := s.Get(ctx, "r1")
	require.NoError(t, err)
	require.Equal(t, 2, rc.Count)
	require.Equal(t, []string{"a", "b"}, rc.NodeList())
	_, err = s.Get(ctx, "r2")
	require.True(t, errdefs.IsNotFound(err), "got %v", err)
	v, err := s.GetUint64(ctx, "fence")
	require.NoError(t, err)
	require.Equal(t, uint64(42), v)
	d, err := s.Deletes(ctx)
	require.NoError(t, err)
	require.Equal(t, map[string]refcount.DeleteMarker{"r3": {Node: "a", Fence: 9, Expires: at}}, d.InFlight)
	require.Equal(t, map[string]refcount.DeleteCompletion{"r4": {Node: "b", At: at}}, d.Completed)
}

func TestBoltClosed(t *testing.T) {
	s := openBolt(t, filepath.Join(t.TempDir(), "refcount.db"))
	require.NoError(t, s.Close())
	_, err := s.Get(t.Context(), "r1")
	require.Error(t, err)
	require.Error(t, s.Set(t.Context(), "r1", refcount.New("a")))
}

func TestBoltOpenTimeout(t *testing.T) {
	path := filepath.Join(t.TempDir(), "refcount.db")
	openBolt(t, path)
	start := time.Now()
	_, err := refcount.OpenBoltStorage(path, refcount.WithOpenTimeout(200*time.Millisecond))
	require.True(t, errdefs.IsUnavailable(err), "got %v", err)
	require.ErrorContains(t, err, path)
	require.Less(t, time.Since(start), 5*time.Second)
}

func TestBoltOpenBadPath(t *testing.T) {
	path := filepath.Join(t.TempDir(), "missing", "refcount.db")
	_, err := refcount.OpenBoltStorage(path)
	require.ErrorContains(t, err, path)
}

// putRaw writes v under key in bucket of the database file at path, which
// must not be open.
func putRaw(t *testing.T, path, bucket, key string, v []byte) {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second})
	require.NoError(t, err)
	defer db.Close()
	require.NoError(t, db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket([]byte(bucket)).Put([]byte(key), v)
	}))
}

func TestBoltDecode(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "refcount.db")
	s := openBolt(t, path)
	require.NoError(t, s.Set(ctx, "good", refcount.New("a")))
	require.NoError(t, s.Close())

	putRaw(t, path, "refcounts", "lying", []byte(`{"count":5,"nodes":["b","a","a"]}`))
	putRaw(t, path, "refcounts", "corrupt", []byte(`{"count":1,"nodes":`))
	putRaw(t, path, "meta", "fence", []byte{1, 2, 3})
	s = openBolt(t, path)

	rc, err := s.Get(ctx, "lying")
	require.NoError(t, err)
	require.Equal(t, 2, rc.Count, "the stored count is not trusted")
	require.Equal(t, []string{"a", "b"}, rc.NodeList())

	_, err = s.Get(ctx, "corrupt")
	require.True(t, errdefs.IsDataLoss(err), "got %v", err)
	require.ErrorContains(t, err, "corrupt")

	err = s.List(ctx, func(string, refcount.ReferenceCount) error { return nil })
	require.True(t, errdefs.IsDataLoss(err), "got %v", err)
	require.ErrorContains(t, err, "corrupt")

	_, err = s.GetUint64(ctx, "fence")
	require.True(t, errdefs.IsDataLoss(err), "got %v", err)
	require.ErrorContains(t, err, "fence")
}

func TestBoltMetaStore(t *testing.T) {
	ctx := t.Context()
	var m refcount.MetaStore = openBolt(t, filepath.Join(t.TempDir(), "refcount.db"))

	v, err := m.GetUint64(ctx, "fence")
	require.NoError(t, err, "an absent key is 0")
	require.Zero(t, v)

	require.NoError(t, m.PutUint64(ctx, "fence", 1<<40+7))
	v, err = m.GetUint64(ctx, "fence")
	require.NoError(t, err)
	require.Equal(t, uint64(1<<40+7), v)

	require.True(t, errdefs.IsInvalidArgument(m.PutUint64(ctx, "", 1)))

	done, cancel := context.WithCancel(ctx)
	cancel()
	_, err = m.GetUint64(done, "fence")
	require.ErrorIs(t, err, context.Canceled)
	require.ErrorIs(t, m.PutUint64(done, "fence", 2), context.Canceled)
}

// BenchmarkBoltAddRef measures concurrent AddRef through a Manager on bolt,
// where group commit shares commits between concurrent writers. Each op adds a new node, so each
// writes; ns/op falls as parallelism (-cpu) rises.
func BenchmarkBoltAddRef(b *testing.B) {
	s := openBolt(b, filepath.Join(b.TempDir(), "refcount.db"))
	m := refcount.NewManager(s)
	var n atomic.Int64
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			i := n.Add(1)
			resource := fmt.Sprintf("sha256:%04d", i%64)
			if _, err := m.AddRef(b.Context(), resource, fmt.Sprintf("node-%d", i)); err != nil {
				b.Error(err)
				return
			}
		}
	})
}
