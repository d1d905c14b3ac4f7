package refcount_test

import (
	"encoding/binary"
	"maps"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/containerd/errdefs"
	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"

	"github.com/sharedcontent/sharedcontent/refcount"
)

// requireNodeRefs requires each node's references read through the
// index (NodeRefs) to be what want (resource ID → nodes) says.
func requireNodeRefs(t *testing.T, s refcount.Storage, want map[string][]string) {
	t.Helper()
	byNode := map[string][]string{}
	for id, nodes := range want {
		for _, n := range nodes {
			byNode[n] = append(byNode[n], id)
		}
	}
	for n, ids := range byNode {
		slices.Sort(ids)
		got, err := s.NodeRefs(t.Context(), n)
		require.NoError(t, err)
		require.Equal(t, ids, got, "node %s", n)
	}
}

// requireSets requires the reference sets of s named by want to be
// what it says, and those of gone to be absent (read one by one: List
// fails on the record format 1 left).
func requireSets(t *testing.T, s refcount.Storage, want map[string][]string, gone ...string) {
	t.Helper()
	for id, nodes := range want {
		rc, err := s.Get(t.Context(), id)
		require.NoError(t, err)
		require.Equal(t, nodes, rc.NodeList(), id)
	}
	for _, id := range gone {
		_, err := s.Get(t.Context(), id)
		require.True(t, errdefs.IsNotFound(err), "%s: %v", id, err)
	}
}

// format2 writes a database as a coordinator of refs_format 2 wrote it:
// every bucket of that format (no nodes bucket), an owner fence of 3,
// each reference set a nested bucket of refcounts with one key per node
// (value 1) and its size as the bucket's sequence, and extra, when not
// nil, run in the same transaction.
func format2(t *testing.T, path string, sets map[string][]string, extra func(tx *bolt.Tx) error) {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second})
	require.NoError(t, err)
	require.NoError(t, db.Update(func(tx *bolt.Tx) error {
		for _, name := range []string{"refcounts", "meta", "members", "deleting", "deleted", "owner"} {
			if _, err := tx.CreateBucketIfNotExists([]byte(name)); err != nil {
				return err
			}
		}
		if err := tx.Bucket([]byte("owner")).Put([]byte("fence"), binary.BigEndian.AppendUint64(nil, 3)); err != nil {
			return err
		}
		if err := tx.Bucket([]byte("meta")).Put([]byte("refs_format"), binary.BigEndian.AppendUint64(nil, 2)); err != nil {
			return err
		}
		for id, nodes := range sets {
			b, err := tx.Bucket([]byte("refcounts")).CreateBucket([]byte(id))
			if err != nil {
				return err
			}
			for _, n := range nodes {
				if err := b.Put([]byte(n), []byte{1}); err != nil {
					return err
				}
			}
			if err := b.SetSequence(uint64(len(nodes))); err != nil {
				return err
			}
		}
		if extra != nil {
			return extra(tx)
		}
		return nil
	}))
	require.NoError(t, db.Close())
}

// storedFormat returns the file's refs_format.
func storedFormat(t *testing.T, path string) uint64 {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second})
	require.NoError(t, err)
	defer db.Close()
	var v uint64
	require.NoError(t, db.View(func(tx *bolt.Tx) error {
		v = binary.BigEndian.Uint64(tx.Bucket([]byte("meta")).Get([]byte("refs_format")))
		return nil
	}))
	return v
}

// TestBoltIndexesFormat2: a database of refs_format 2 (reference sets as
// nested buckets, no per-node index) opens with the index built, in
// several transactions when it is bigger than one chunk (here 3
// references), and records format 3; a record format 1 left (one that did
// not decode) is no set and is not indexed; the writes after it keep the
// index; opening it again changes nothing.
func TestBoltIndexesFormat2(t *testing.T) {
	defer refcount.SetIndexChunk(3)()
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "refcount.db")
	want := map[string][]string{
		"sha256:a": {"n1", "n2", "n3"},
		"sha256:b": {"n2"},
		"sha256:c": {"n1", "n3"},
		"sha256:d": {"n4"},
		"sha256:e": {"n1"},
	}
	format2(t, path, want, func(tx *bolt.Tx) error {
		return tx.Bucket([]byte("refcounts")).Put([]byte("sha256:bad"), []byte("{not json"))
	})

	s := openBolt(t, path)
	require.Equal(t, uint64(4), s.OwnerFence())
	requireNodeRefs(t, s, want)
	require.NoError(t, s.Close())
	require.Equal(t, uint64(3), storedFormat(t, path))

	s = openBolt(t, path)
	requireNodeRefs(t, s, want)
	_, err := s.Get(ctx, "sha256:bad")
	require.ErrorContains(t, err, "decode", "the record left stays as it was")
	require.NoError(t, s.Commit(ctx, new(refcount.Batch).ReplaceNode("n1", map[string]struct{}{"sha256:b": {}}).
		DropRefs("sha256:a").ReplaceNode("n4", nil)))
	want = map[string][]string{"sha256:b": {"n1", "n2"}, "sha256:c": {"n3"}}
	requireSets(t, s, want, "sha256:a", "sha256:d", "sha256:e")
	requireNodeRefs(t, s, want)
	for _, n := range []string{"n4"} {
		got, err := s.NodeRefs(ctx, n)
		require.NoError(t, err)
		require.Empty(t, got, "node %s references nothing", n)
	}
}

// TestBoltRebuildsStaleIndex: a coordinator of format 2 that opens a
// format 3 file records format 2 again and writes without the index
// (and a crash while the index is built leaves it half done, format 2):
// the next open drops the stale index and builds it anew.
func TestBoltRebuildsStaleIndex(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "refcount.db")
	s := openBolt(t, path)
	require.NoError(t, s.Commit(ctx, new(refcount.Batch).AddRef("r1", "n1").AddRef("r2", "n1").AddRef("r2", "n2")))
	require.NoError(t, s.Close())
	// The older coordinator: n1 forgotten (its sets changed, not its
	// index), n3 added, the format back at 2.
	format2(t, path, map[string][]string{"r3": {"n3"}}, func(tx *bolt.Tx) error {
		refs := tx.Bucket([]byte("refcounts"))
		if err := refs.DeleteBucket([]byte("r1")); err != nil {
			return err
		}
		if err := refs.Bucket([]byte("r2")).Delete([]byte("n1")); err != nil {
			return err
		}
		return refs.Bucket([]byte("r2")).SetSequence(1)
	})
	s = openBolt(t, path)
	want := map[string][]string{"r2": {"n2"}, "r3": {"n3"}}
	requireSets(t, s, want, "r1")
	requireNodeRefs(t, s, want)
	got, err := s.NodeRefs(ctx, "n1")
	require.NoError(t, err)
	require.Empty(t, got, "the stale index of n1 is gone")
	// A forget reads the rebuilt index: n2's goes, nothing else.
	require.NoError(t, s.Commit(ctx, new(refcount.Batch).ReplaceNode("n2", nil)))
	requireSets(t, s, map[string][]string{"r3": {"n3"}}, "r2")
}

// TestBoltIndexFailedWrite: a batch that fails half-way through its
// transaction (here an add to the record format 1 left, after a forget
// that changed the index) leaves the index as it was, alone or sharing
// a group commit with other batches.
func TestBoltIndexFailedWrite(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "refcount.db")
	want := map[string][]string{"r1": {"n1", "n2"}, "r2": {"n1"}}
	format2(t, path, want, func(tx *bolt.Tx) error {
		return tx.Bucket([]byte("refcounts")).Put([]byte("bad"), []byte("{not json"))
	})
	s := openBolt(t, path)
	bad := func() *refcount.Batch {
		return new(refcount.Batch).ReplaceNode("n1", map[string]struct{}{"r3": {}}).AddRef("bad", "n1")
	}
	require.Error(t, s.Commit(ctx, bad()))
	requireSets(t, s, want, "r3")
	requireNodeRefs(t, s, want)

	// Many at once share group commits; the bad ones fail alone.
	const n = 16
	waits := make([]func() error, n)
	for i := range n {
		if i%2 == 0 {
			waits[i] = s.Submit(ctx, bad())
		} else {
			waits[i] = s.Submit(ctx, new(refcount.Batch).AddRef("r4", "n2"))
		}
	}
	for i, w := range waits {
		if i%2 == 0 {
			require.Error(t, w())
		} else {
			require.NoError(t, w())
		}
	}
	want = maps.Clone(want)
	want["r4"] = []string{"n2"}
	requireSets(t, s, want, "r3")
	requireNodeRefs(t, s, want)
}
