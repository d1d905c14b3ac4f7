package refcount

import (
	"math/rand/v2"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sharedcontent/sharedcontent/internal/synchash"
)

// requireHashes checks that m's kept hashes equal those a fresh walk of the
// storage computes.
func requireHashes(t *testing.T, m *Manager, nodes ...string) {
	t.Helper()
	fresh := NewManager(m.Storage())
	require.NoError(t, fresh.BuildHashes(t.Context()))
	for _, n := range nodes {
		kept, ok := m.NodeHash(n)
		require.True(t, ok)
		want, _ := fresh.NodeHash(n)
		require.Equal(t, want, kept, "node %s", n)
	}
}

// TestHashesKept: every write through the Manager keeps the nodes' hashes
// equal to those of the stored references, on both stores, and a restart
// (a new Manager over the same file) builds them again.
func TestHashesKept(t *testing.T) {
	path := filepath.Join(t.TempDir(), "refs.db")
	bolt, err := OpenBoltStorage(path)
	require.NoError(t, err)
	for name, s := range map[string]Storage{"memory": NewMemoryStorage(), "bolt": bolt} {
		t.Run(name, func(t *testing.T) {
			ctx := t.Context()
			m := NewManager(s)
			require.NoError(t, m.BuildHashes(ctx))
			h, ok := m.NodeHash("n")
			require.True(t, ok)
			require.True(t, h.Empty())

			for _, id := range []string{"a", "b", "c", "d"} {
				_, err := m.AddRef(ctx, id, "n")
				require.NoError(t, err)
			}
			_, err := m.AddRef(ctx, "a", "n") // twice: counted once
			require.NoError(t, err)
			_, err = m.AddRef(ctx, "a", "m")
			require.NoError(t, err)
			h, _ = m.NodeHash("n")
			require.Equal(t, *synchash.FromIDs([]string{"a", "b", "c", "d"}), h)
			requireHashes(t, m, "n", "m")

			_, err = m.RemoveRef(ctx, "b", "n") // drop
			require.NoError(t, err)
			requireHashes(t, m, "n", "m")
			// A delete's completion drops the set; a batch adds and drops.
			require.NoError(t, m.Commit(ctx, new(Batch).DropRefs("a").AddRef("e", "n").AddRef("e", "n").RemoveRef("c", "n")))
			requireHashes(t, m, "n", "m")
			h, _ = m.NodeHash("m")
			require.True(t, h.Empty(), "m's only reference was dropped")
			// A bucket-wise replace, then a full one.
			require.NoError(t, m.Commit(ctx, new(Batch).ReplaceNodeBuckets("n", []int{synchash.Bucket("f")}, map[string]struct{}{"f": {}})))
			requireHashes(t, m, "n")
			require.NoError(t, m.Commit(ctx, new(Batch).AddRef("g", "m").ReplaceNode("n", map[string]struct{}{"g": {}, "h": {}}).AddRef("g", "n")))
			requireHashes(t, m, "n", "m")
			h, _ = m.NodeHash("n")
			require.Equal(t, *synchash.FromIDs([]string{"g", "h"}), h)
			// Forget.
			require.NoError(t, m.ReplaceNode(ctx, "n", nil))
			h, _ = m.NodeHash("n")
			require.True(t, h.Empty())
			requireHashes(t, m, "n", "m")
		})
	}
	// Restart: a new Manager over the reopened file walks it once.
	require.NoError(t, bolt.Close())
	bolt, err = OpenBoltStorage(path)
	require.NoError(t, err)
	defer bolt.Close()
	m := NewManager(bolt)
	_, ok := m.NodeHash("m")
	require.False(t, ok, "not built yet")
	require.NoError(t, m.BuildHashes(t.Context()))
	h, _ := m.NodeHash("m")
	require.Equal(t, *synchash.FromIDs([]string{"g"}), h)
}

// TestOrderedAddHidesTheHash: a reference added by AddRefOrdered is
// written outside the stripes, so its node's hash is not offered (a sync
// of it is whole) until a whole ReplaceNode sets the hash anew; a hash
// that missed the reference could make a node whose journal has it, and
// the coordinator not, look synced.
func TestOrderedAddHidesTheHash(t *testing.T) {
	bolt, err := OpenBoltStorage(filepath.Join(t.TempDir(), "refs.db"))
	require.NoError(t, err)
	t.Cleanup(func() { bolt.Close() })
	for name, s := range map[string]Storage{"memory": NewMemoryStorage(), "bolt": bolt} {
		t.Run(name, func(t *testing.T) {
			ctx := t.Context()
			m := NewManager(s)
			require.NoError(t, m.BuildHashes(ctx))
			n, err := m.AddRefOrdered(ctx, "a", "n")()
			require.NoError(t, err)
			require.Equal(t, 1, n)
			_, ok := m.NodeHash("n")
			require.False(t, ok, "the ordered add is not in the hash")
			_, ok = m.NodeHash("m")
			require.True(t, ok, "another node's hash is offered")

			require.NoError(t, m.ReplaceNode(ctx, "n", map[string]struct{}{"a": {}, "b": {}}))
			h, ok := m.NodeHash("n")
			require.True(t, ok, "a whole replace sets the hash anew")
			require.Equal(t, *synchash.FromIDs([]string{"a", "b"}), h)
			requireHashes(t, m, "n")
		})
	}
}

// plainStorage hides a store's optional interfaces (that it commits a
// batch whole, NodeLister): the Manager then splits big batches into
// groups.
type plainStorage struct{ Storage }

// TestHashesKeptRandom: batches that mix every write to reference sets,
// in any order and touching the same sets and nodes several times, keep
// every node's hash equal to a fresh walk's, on every store and on one
// that hides its optional interfaces.
func TestHashesKeptRandom(t *testing.T) {
	bolt, err := OpenBoltStorage(filepath.Join(t.TempDir(), "refs.db"))
	require.NoError(t, err)
	t.Cleanup(func() { bolt.Close() })
	stores := map[string]Storage{"memory": NewMemoryStorage(), "bolt": bolt, "plain": plainStorage{NewMemoryStorage()}}
	for name, s := range stores {
		t.Run(name, func(t *testing.T) {
			ctx := t.Context()
			m := NewManager(s)
			require.NoError(t, m.BuildHashes(ctx))
			ids := []string{"a", "b", "c", "d", "e", "f", "g", "h"}
			nodes := []string{"n0", "n1", "n2"}
			rng := rand.New(rand.NewPCG(26, 7))
			some := func() map[string]struct{} {
				refs := map[string]struct{}{}
				for _, id := range ids {
					if rng.IntN(2) == 0 {
						refs[id] = struct{}{}
					}
				}
				return refs
			}
			for range 200 {
				b := new(Batch)
				for range 1 + rng.IntN(6) {
					id, node := ids[rng.IntN(len(ids))], nodes[rng.IntN(len(nodes))]
					switch rng.IntN(6) {
					case 0, 1:
						b.AddRef(id, node)
					case 2:
						b.RemoveRef(id, node)
					case 3:
						b.DropRefs(id)
					case 4:
						b.ReplaceNode(node, some())
					case 5:
						buckets := []int{synchash.Bucket(id)}
						refs := map[string]struct{}{}
						for r := range some() {
							if synchash.Bucket(r) == buckets[0] {
								refs[r] = struct{}{}
							}
						}
						b.ReplaceNodeBuckets(node, buckets, refs)
					}
				}
				require.NoError(t, m.Commit(ctx, b))
				requireHashes(t, m, nodes...)
			}
		})
	}
}
