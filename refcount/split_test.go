package refcount

import (
	"context"
	"fmt"
	"maps"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sharedcontent/sharedcontent/internal/synchash"
)

func idSet(n int, prefix string) map[string]struct{} {
	out := make(map[string]struct{}, n)
	for i := range n {
		out[fmt.Sprintf("sha256:%s%05d", prefix, i)] = struct{}{}
	}
	return out
}

// groupChanges returns, per atomic group of b, how many references of
// node it changes when the node held stored before b (every write of b
// is of node).
func groupChanges(t *testing.T, b *Batch, node string, stored map[string]struct{}) []int {
	t.Helper()
	cur := map[string]struct{}{}
	maps.Copy(cur, stored)
	var out []int
	for _, g := range b.Groups() {
		n := 0
		for _, op := range g {
			require.Equal(t, node, op.Node)
			switch op.Kind {
			case WriteAddRef:
				if _, ok := cur[op.Key]; !ok {
					cur[op.Key] = struct{}{}
					n++
				}
			case WriteRemoveRef:
				if _, ok := cur[op.Key]; ok {
					delete(cur, op.Key)
					n++
				}
			case WriteReplaceNode:
				for id := range cur {
					if _, keep := op.NodeRefs[id]; !keep && op.Buckets.Holds(id) {
						delete(cur, id)
						n++
					}
				}
				for id := range op.NodeRefs {
					if _, ok := cur[id]; !ok {
						cur[id] = struct{}{}
						n++
					}
				}
			default:
				t.Fatalf("write kind %d", op.Kind)
			}
		}
		out = append(out, n)
	}
	return out
}

// TestReplaceNodeGroups: a replace cut into groups changes at most
// GroupRefs references per group, and the groups together leave the node
// with exactly the references named, whether the node had many (most
// buckets change a little), had none and gets more than a bucket's share
// (a bucket alone does not fit: its additions go first), or is forgotten.
// A small replace stays one write, and so does any replace on a store
// that commits every batch whole.
func TestReplaceNodeGroups(t *testing.T) {
	ctx := context.Background()
	old := idSet(3000, "old")
	kept := idSet(1500, "old") // half of old
	for _, tc := range []struct {
		name         string
		stored, refs map[string]struct{}
		buckets      *BucketSet
	}{
		{"half replaced", old, mergeSets(kept, idSet(1000, "new")), nil},
		{"first sync, big buckets", nil, crowded(4, 300), nil},
		{"forget", old, nil, nil},
		{"crowded forget", crowded(4, 300), nil, nil},
		{"crowded drop", crowded(4, 300), onlyFirst(crowded(4, 300), 20), nil},
		{"crowded swap", crowded(4, 600), crowdedNamed("swap", 4, 600), nil},
		{"crowded swap, some kept", crowded(4, 600), mergeSets(onlyFirst(crowded(4, 600), 300), crowdedNamed("swap", 4, 300)), nil},
		{"some buckets", old, onlyBuckets(idSet(1000, "new"), 0, 1, 2, 200), &BucketSet{0: true, 1: true, 2: true, 200: true}},
		{"small", idSet(10, "old"), idSet(20, "old"), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := NewManager(&failingCommits{Storage: NewMemoryStorage()}) // a wrapper: not whole
			require.NoError(t, m.ReplaceNode(ctx, "n", tc.stored))
			require.NoError(t, m.BuildHashes(ctx))
			b, err := m.ReplaceNodeGroups(ctx, new(Batch), "n", tc.buckets, tc.refs)
			require.NoError(t, err)
			changes := groupChanges(t, b, "n", tc.stored)
			if tc.name == "small" {
				require.Equal(t, 1, b.Len(), "a small replace is one write")
			} else {
				require.GreaterOrEqual(t, len(changes), 2)
			}
			for i, n := range changes {
				require.LessOrEqual(t, n, GroupRefs, "group %d of %d", i, len(changes))
			}
			require.NoError(t, m.Commit(ctx, b))
			want := map[string]struct{}{}
			maps.Copy(want, tc.refs)
			if tc.buckets != nil {
				for id := range tc.stored {
					if !tc.buckets.Holds(id) {
						want[id] = struct{}{}
					}
				}
			}
			got := map[string]struct{}{}
			page, err := m.List(ctx, "", 1<<20)
			require.NoError(t, err)
			for _, e := range page {
				if e.Refs.Has("n") {
					got[e.ResourceID] = struct{}{}
				}
			}
			require.Equal(t, len(want), len(got))
			require.Equal(t, want, got)
			h, ok := m.NodeHash("n")
			require.True(t, ok)
			require.Equal(t, *synchash.FromIDs(keys(want)), h)
		})
	}
}

// TestReplaceNodeGroupsWhole: memory and bbolt commit every batch whole,
// so a big replace stays one write for them.
func TestReplaceNodeGroupsWhole(t *testing.T) {
	bolt, err := OpenBoltStorage(filepath.Join(t.TempDir(), "db"))
	require.NoError(t, err)
	t.Cleanup(func() { bolt.Close() })
	for _, s := range []Storage{NewMemoryStorage(), bolt} {
		ctx := context.Background()
		m := NewManager(s)
		require.NoError(t, m.BuildHashes(ctx))
		b, err := m.ReplaceNodeGroups(ctx, new(Batch), "n", nil, idSet(1000, "x"))
		require.NoError(t, err)
		require.Equal(t, 1, b.Len(), "%T", s)
	}
}

// TestReplaceNodeGroupsClearsDirty: a node whose hash may miss a
// reference (added by AddRefOrdered) has it set anew by a replace cut
// into groups that cover every bucket, as by a whole ReplaceNode; a
// Commit that fails marks the nodes it touches.
func TestReplaceNodeGroupsClearsDirty(t *testing.T) {
	ctx := context.Background()
	s := &failingCommits{Storage: NewMemoryStorage()}
	m := NewManager(s)
	require.NoError(t, m.BuildHashes(ctx))
	_, err := m.AddRefOrdered(ctx, "sha256:hot", "n")() // a wrapper: AddRef
	require.NoError(t, err)
	m.markDirty("n") // as AddRefOrdered on the store itself does
	_, ok := m.NodeHash("n")
	require.False(t, ok)
	refs := idSet(1000, "x")
	b, err := m.ReplaceNodeGroups(ctx, new(Batch), "n", nil, refs)
	require.NoError(t, err)
	require.Greater(t, len(b.Groups()), 2)
	require.NoError(t, m.Commit(ctx, b))
	h, ok := m.NodeHash("n")
	require.True(t, ok, "a replace of every bucket, in groups, sets the hash anew")
	require.Equal(t, *synchash.FromIDs(keys(refs)), h)

	s.fail = true
	require.Error(t, m.Commit(ctx, new(Batch).AddRef("sha256:y", "n")))
	_, ok = m.NodeHash("n")
	require.False(t, ok, "a failed commit leaves the node's hash offered")
}

// TestReplaceNodeGroupsStopped: a replace that swaps hundreds of
// references in a few buckets for others (more than a group holds both
// ways), stopped after any prefix of its groups, leaves every reference
// of the node either as it was or as the replace says; the node's hash
// is not offered (the failed Commit marks it), and the hash a new leader
// builds from the store differs from the journal's in every bucket whose
// stored references differ, so the next sync by hash sends those buckets
// and ends with exactly the journal.
func TestReplaceNodeGroupsStopped(t *testing.T) {
	ctx := context.Background()
	old := mergeSets(crowded(4, 600), idSet(500, "spread"))
	refs := mergeSets(crowdedNamed("swap", 4, 600), onlyFirst(idSet(500, "spread"), 250))
	journal := synchash.FromIDs(keys(refs))

	plan := func(s Storage) (*Manager, *Batch) {
		m := NewManager(s)
		require.NoError(t, m.ReplaceNode(ctx, "n", old))
		require.NoError(t, m.BuildHashes(ctx))
		b, err := m.ReplaceNodeGroups(ctx, new(Batch), "n", nil, refs)
		require.NoError(t, err)
		return m, b
	}
	_, whole := plan(&failingCommits{Storage: NewMemoryStorage()})
	groups := len(whole.Groups())
	require.Greater(t, groups, 10)
	for _, k := range []int{1, 2, 3, groups / 2, groups - 2, groups - 1} {
		t.Run(fmt.Sprint(k), func(t *testing.T) {
			mem := NewMemoryStorage()
			s := &stoppingCommits{Storage: mem, after: -1}
			m, b := plan(s)
			s.after = k
			require.Error(t, m.Commit(ctx, b))
			_, ok := m.NodeHash("n")
			require.False(t, ok, "the node's hash is offered after a replace stopped in part")

			stored := nodeRefs(t, mem, "n")
			for id := range stored {
				_, was := old[id]
				_, will := refs[id]
				require.True(t, was || will, "%s is neither as it was nor as the replace says", id)
			}
			for id := range old {
				if _, will := refs[id]; will {
					require.Contains(t, stored, id, "a reference both old and new was dropped")
				}
			}

			// A new leader builds the hashes from what was committed.
			next := NewManager(&failingCommits{Storage: mem}) // a wrapper: not whole
			require.NoError(t, next.BuildHashes(ctx))
			h, ok := next.NodeHash("n")
			require.True(t, ok)
			differ := h.Differ(journal)
			want := []int{}
			var storedT synchash.Table = *synchash.FromIDs(keys(stored))
			for i := range synchash.Buckets {
				if storedT[i] != journal[i] {
					want = append(want, i)
				}
			}
			require.ElementsMatch(t, want, differ)
			require.NotEmpty(t, differ, "stopped after %d of %d groups, the store holds the journal already", k, groups)

			// The next sync by hash: only the differing buckets.
			resend := new(BucketSet)
			sent := map[string]struct{}{}
			for _, i := range differ {
				resend[i] = true
			}
			for id := range refs {
				if resend.Holds(id) {
					sent[id] = struct{}{}
				}
			}
			b2, err := next.ReplaceNodeGroups(ctx, new(Batch), "n", resend, sent)
			require.NoError(t, err)
			for i, n := range groupChanges(t, b2, "n", stored) {
				require.LessOrEqual(t, n, GroupRefs, "group %d", i)
			}
			require.NoError(t, next.Commit(ctx, b2))
			require.Equal(t, refs, nodeRefs(t, mem, "n"))
			h, ok = next.NodeHash("n")
			require.True(t, ok)
			require.Equal(t, *journal, h)
		})
	}
}

// stoppingCommits commits only the first after groups of a batch that
// has more (after < 0: every batch whole), then fails, as the etcd store
// does when a later transaction fails.
type stoppingCommits struct {
	Storage
	after int
}

func (s *stoppingCommits) Commit(ctx context.Context, b *Batch) error {
	if s.after < 0 || len(b.Groups()) <= s.after {
		return s.Storage.Commit(ctx, b)
	}
	if err := s.Storage.Commit(ctx, b.Head(s.after)); err != nil {
		return err
	}
	return fmt.Errorf("stopped after %d groups", s.after)
}

// nodeRefs returns the resources node references in s.
func nodeRefs(t *testing.T, s Storage, node string) map[string]struct{} {
	t.Helper()
	page, err := s.List(context.Background(), "", 1<<20)
	require.NoError(t, err)
	out := map[string]struct{}{}
	for _, e := range page {
		if e.Refs.Has(node) {
			out[e.ResourceID] = struct{}{}
		}
	}
	return out
}

// failingCommits is a store whose Commits fail while fail is set (set
// before the Manager's calls, read by them: no race).
type failingCommits struct {
	Storage
	fail bool
}

func (s *failingCommits) Commit(ctx context.Context, b *Batch) error {
	if s.fail {
		return fmt.Errorf("commit refused")
	}
	return s.Storage.Commit(ctx, b)
}

// crowded returns n resource IDs in the first buckets buckets: more per
// bucket than a group holds once n/buckets > GroupRefs.
func crowded(buckets, n int) map[string]struct{} { return crowdedNamed("crowd", buckets, n) }

// crowdedNamed is crowded with IDs named after prefix: another prefix
// gives other IDs in the same buckets.
func crowdedNamed(prefix string, buckets, n int) map[string]struct{} {
	out := map[string]struct{}{}
	for i := 0; len(out) < n; i++ {
		if id := fmt.Sprintf("sha256:%s%07d", prefix, i); synchash.Bucket(id) < buckets {
			out[id] = struct{}{}
		}
	}
	return out
}

// onlyFirst returns n of the IDs of s.
func onlyFirst(s map[string]struct{}, n int) map[string]struct{} {
	out := map[string]struct{}{}
	for id := range s {
		if len(out) == n {
			break
		}
		out[id] = struct{}{}
	}
	return out
}

func mergeSets(a, b map[string]struct{}) map[string]struct{} {
	out := maps.Clone(a)
	maps.Copy(out, b)
	return out
}

func onlyBuckets(s map[string]struct{}, buckets ...int) map[string]struct{} {
	out := map[string]struct{}{}
	for id := range s {
		for _, b := range buckets {
			if synchash.Bucket(id) == b {
				out[id] = struct{}{}
			}
		}
	}
	return out
}

func keys(s map[string]struct{}) []string {
	out := make([]string, 0, len(s))
	for id := range s {
		out = append(out, id)
	}
	return out
}
