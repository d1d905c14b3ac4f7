package refcount_test

import (
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
	storagetest.Run(t, newBoltStorage, storagetest.TakeOverLocal)
}

func TestBoltPersistence(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "refcount.db")
	s := openBolt(t, path)
	at := time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)
	require.NoError(t, s.Commit(ctx, new(refcount.Batch).AddRef("r1", "b").AddRef("r1", "a").AddRef("r2", "c").
		PutUint64("fence", 42).PutIdentity(refcount.Identity{ClusterID: "c1", Epoch: 3}).PutLeaseFenceMark(2048).
		PutMember(refcount.Member{ID: "n1", FirstSeen: at, Generation: "g"}).
		PutDeleting("r3", refcount.DeleteMarker{Node: "a", Fence: 9, Expires: at}).
		PutDeleted("r4", refcount.DeleteCompletion{Node: "b", At: at})))
	require.NoError(t, s.Commit(ctx, new(refcount.Batch).DropRefs("r2")))
	fence := s.OwnerFence()
	require.NoError(t, s.Close())

	s = openBolt(t, path)
	require.Equal(t, fence+1, s.OwnerFence(), "opening the file takes it over")
	rc, err := s.Get(ctx, "r1")
	require.NoError(t, err)
	require.Equal(t, 2, rc.Len())
	require.Equal(t, []string{"a", "b"}, rc.NodeList())
	_, err = s.Get(ctx, "r2")
	require.True(t, errdefs.IsNotFound(err), "got %v", err)
	v, err := s.GetUint64(ctx, "fence")
	require.NoError(t, err)
	require.Equal(t, uint64(42), v)
	id, err := s.Identity(ctx)
	require.NoError(t, err)
	require.Equal(t, refcount.Identity{ClusterID: "c1", Epoch: 3}, id)
	v, err = s.LeaseFenceMark(ctx)
	require.NoError(t, err)
	require.Equal(t, uint64(2048), v)
	ms, err := s.ListMembers(ctx)
	require.NoError(t, err)
	require.Equal(t, []refcount.Member{{ID: "n1", FirstSeen: at, Generation: "g"}}, ms)
	d, err := s.Deletes(ctx)
	require.NoError(t, err)
	require.Equal(t, map[string]refcount.DeleteMarker{"r3": {Node: "a", Fence: 9, Expires: at}}, d.InFlight)
	require.Equal(t, map[string]refcount.DeleteCompletion{"r4": {Node: "b", At: at}}, d.Completed)
}

// TestBoltFormat: a database written before the owner bucket existed,
// with the meta keys the coordinator wrote directly then, opens and reads
// the same, and is taken over.
func TestBoltFormat(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "refcount.db")
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second})
	require.NoError(t, err)
	require.NoError(t, db.Update(func(tx *bolt.Tx) error {
		for _, name := range []string{"refcounts", "meta", "members", "deleting", "deleted"} {
			if _, err := tx.CreateBucket([]byte(name)); err != nil {
				return err
			}
		}
		meta := tx.Bucket([]byte("meta"))
		require.NoError(t, meta.Put([]byte("cluster_id"), []byte("c-old")))
		require.NoError(t, meta.Put([]byte("epoch"), []byte{0, 0, 0, 0, 0, 0, 0, 7}))
		require.NoError(t, meta.Put([]byte("fence_high_water_mark"), []byte{0, 0, 0, 0, 0, 0, 4, 0}))
		return tx.Bucket([]byte("refcounts")).Put([]byte("r1"), []byte(`{"count":2,"nodes":["a","b"]}`))
	}))
	require.NoError(t, db.Close())

	s := openBolt(t, path)
	require.Equal(t, uint64(1), s.OwnerFence())
	id, err := s.Identity(ctx)
	require.NoError(t, err)
	require.Equal(t, refcount.Identity{ClusterID: "c-old", Epoch: 7}, id)
	v, err := s.LeaseFenceMark(ctx)
	require.NoError(t, err)
	require.Equal(t, uint64(1024), v)
	rc, err := s.Get(ctx, "r1")
	require.NoError(t, err)
	require.Equal(t, []string{"a", "b"}, rc.NodeList())
	require.NoError(t, s.Commit(ctx, new(refcount.Batch).AddRef("r1", "c")))
}

// TestBoltTakeOverSharesFile: the file stays open until its last handle
// closes.
func TestBoltTakeOverSharesFile(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "refcount.db")
	s := openBolt(t, path)
	n, err := s.TakeOver(ctx)
	require.NoError(t, err)
	require.NoError(t, s.Close())
	require.NoError(t, n.Commit(ctx, new(refcount.Batch).AddRef("r1", "a")), "the file outlives the older handle")
	require.NoError(t, n.Close())
	_, err = s.TakeOver(ctx)
	require.Error(t, err, "a closed handle takes nothing over")

	s = openBolt(t, path)
	require.Equal(t, uint64(3), s.OwnerFence(), "open, take over, open")
	rc, err := s.Get(ctx, "r1")
	require.NoError(t, err)
	require.Equal(t, []string{"a"}, rc.NodeList())
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
	oldFormat(t, path, map[string]string{"good": `{"count":1,"nodes":["a"]}`})
	putRaw(t, path, "refcounts", "lying", []byte(`{"count":5,"nodes":["b","a","a"]}`))
	putRaw(t, path, "refcounts", "corrupt", []byte(`{"count":1,"nodes":`))
	putRaw(t, path, "meta", "fence", []byte{1, 2, 3})
	s := openBolt(t, path)

	rc, err := s.Get(ctx, "lying")
	require.NoError(t, err)
	require.Equal(t, 2, rc.Len(), "the stored count is not trusted")
	require.Equal(t, []string{"a", "b"}, rc.NodeList())

	_, err = s.Get(ctx, "corrupt")
	require.True(t, errdefs.IsDataLoss(err), "got %v", err)
	require.ErrorContains(t, err, "corrupt")

	_, err = s.List(ctx, "", 10)
	require.True(t, errdefs.IsDataLoss(err), "got %v", err)
	require.ErrorContains(t, err, "corrupt")

	require.NoError(t, s.Commit(ctx, new(refcount.Batch).DropRefs("corrupt")), "a record that does not decode can be dropped")
	page, err := s.List(ctx, "", 10)
	require.NoError(t, err)
	require.Len(t, page, 2)

	_, err = s.GetUint64(ctx, "fence")
	require.True(t, errdefs.IsDataLoss(err), "got %v", err)
	require.ErrorContains(t, err, "fence")

	require.NoError(t, s.Close())
	putRaw(t, path, "owner", "fence", []byte{1})
	_, err = refcount.OpenBoltStorage(path)
	require.True(t, errdefs.IsDataLoss(err), "a corrupt owner: %v", err)
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
