package refcount_test

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/containerd/errdefs"
	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"

	"github.com/sharedcontent/sharedcontent/refcount"
)

// oldFormat writes a database as the coordinator wrote it before
// reference sets were nested buckets: every bucket, an owner fence of 3,
// and each record of refs (resource ID → JSON boltRecord) as it is.
func oldFormat(t *testing.T, path string, refs map[string]string) {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second})
	require.NoError(t, err)
	require.NoError(t, db.Update(func(tx *bolt.Tx) error {
		for _, name := range []string{"refcounts", "meta", "members", "deleting", "deleted", "owner"} {
			if _, err := tx.CreateBucket([]byte(name)); err != nil {
				return err
			}
		}
		if err := tx.Bucket([]byte("owner")).Put([]byte("fence"), []byte{0, 0, 0, 0, 0, 0, 0, 3}); err != nil {
			return err
		}
		for id, v := range refs {
			if err := tx.Bucket([]byte("refcounts")).Put([]byte(id), []byte(v)); err != nil {
				return err
			}
		}
		return nil
	}))
	require.NoError(t, db.Close())
}

// TestBoltMigratesJSONRecords: a database whose reference sets are JSON
// records opens with every set as it was, now one key per reference, and
// the writes after it work on them; opening it again changes nothing.
func TestBoltMigratesJSONRecords(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "refcount.db")
	oldFormat(t, path, map[string]string{
		"sha256:a": `{"count":3,"nodes":["n1","n2","n3"]}`,
		"sha256:b": `{"count":1,"nodes":["n2"]}`,
		"sha256:c": `{"count":2,"nodes":["n3","n1"]}`,
	})
	want := map[string][]string{"sha256:a": {"n1", "n2", "n3"}, "sha256:b": {"n2"}, "sha256:c": {"n1", "n3"}}
	check := func(s *refcount.BoltStorage) {
		t.Helper()
		page, err := s.List(ctx, "", 10)
		require.NoError(t, err)
		got := map[string][]string{}
		for _, e := range page {
			got[e.ResourceID] = e.Refs.NodeList()
		}
		require.Equal(t, want, got)
		for id, nodes := range want {
			has, n, err := s.RefState(ctx, id, nodes[0])
			require.NoError(t, err)
			require.True(t, has)
			require.Equal(t, len(nodes), n, id)
		}
		requireNodeRefs(t, s, want)
	}

	s := openBolt(t, path)
	require.Equal(t, uint64(4), s.OwnerFence())
	check(s)
	require.NoError(t, s.Close())
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second})
	require.NoError(t, err)
	require.NoError(t, db.View(func(tx *bolt.Tx) error {
		refs := tx.Bucket([]byte("refcounts"))
		for id, nodes := range want {
			b := refs.Bucket([]byte(id))
			require.NotNil(t, b, "%s is a nested bucket", id)
			require.Equal(t, uint64(len(nodes)), b.Sequence(), "%s's count", id)
		}
		require.Equal(t, []byte{0, 0, 0, 0, 0, 0, 0, 3}, tx.Bucket([]byte("meta")).Get([]byte("refs_format")), "migrated and indexed")
		return nil
	}))
	require.NoError(t, db.Close())

	s = openBolt(t, path)
	check(s)
	require.NoError(t, s.Commit(ctx, new(refcount.Batch).AddRef("sha256:b", "n4").RemoveRef("sha256:a", "n2").
		RemoveRef("sha256:c", "n1").RemoveRef("sha256:c", "n3")))
	want = map[string][]string{"sha256:a": {"n1", "n3"}, "sha256:b": {"n2", "n4"}}
	check(s)
	_, err = s.Get(ctx, "sha256:c")
	require.True(t, errdefs.IsNotFound(err), "the emptied set is dropped: %v", err)
	require.NoError(t, s.Commit(ctx, new(refcount.Batch).ReplaceNode("n2", map[string]struct{}{"sha256:a": {}})))
	want = map[string][]string{"sha256:a": {"n1", "n2", "n3"}, "sha256:b": {"n4"}}
	check(s)
}

// TestBoltReservesFormatKey: the format's meta key is the store's.
func TestBoltReservesFormatKey(t *testing.T) {
	s := openBolt(t, filepath.Join(t.TempDir(), "refcount.db"))
	err := s.Commit(t.Context(), new(refcount.Batch).PutUint64("refs_format", 1))
	require.True(t, errdefs.IsInvalidArgument(err), "got %v", err)
}
