package refcount_test

import (
	"fmt"
	"path/filepath"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sharedcontent/sharedcontent/internal/synchash"
	"github.com/sharedcontent/sharedcontent/refcount"
)

// TestBatchSlices: consecutive groups share a slice while their
// references fit (a replace counts those it names), a heavier group goes
// alone, and the slices hold every write of the batch, in order.
func TestBatchSlices(t *testing.T) {
	b := new(refcount.Batch).DropDeleted("a").Break().DropDeleted("b").Break().
		ReplaceNode("n", map[string]struct{}{"x": {}, "y": {}, "z": {}}).Break().
		DropDeleted("c").DropDeleted("d").Break().DropDeleted("e")
	var got [][]string
	for _, s := range b.Slices(3) {
		got = append(got, keysOf(s))
	}
	require.Equal(t, [][]string{{"a", "b"}, {""}, {"c", "d", "e"}}, got)
	require.Len(t, b.Slices(100), 1)
}

func keysOf(b *refcount.Batch) []string {
	var out []string
	for _, op := range b.Writes() {
		out = append(out, op.Key)
	}
	return out
}

// TestBigReplaceSlicedOnBolt (docs/design.md §10.5): on bbolt a replace
// of more than SliceRefs references is cut by bucket into slices of at
// most about SliceRefs; committed one at a time, any prefix leaves each
// bucket of the node either as it was or as the new journal says, and
// all of them make the node's references exactly the journal.
func TestBigReplaceSlicedOnBolt(t *testing.T) {
	const slice = 200
	defer refcount.SetSliceRefs(slice)()
	ctx := t.Context()
	s := openBolt(t, filepath.Join(t.TempDir(), "refcount.db"))
	m := refcount.NewManager(s)
	require.NoError(t, m.BuildHashes(ctx))
	journal := func(from, n int) map[string]struct{} {
		out := map[string]struct{}{}
		for i := from; i < from+n; i++ {
			out[fmt.Sprintf("sha256:%064d", i)] = struct{}{}
		}
		return out
	}
	n := 3 * slice
	a, b := journal(0, n), journal(n/2, n) // half of b is new
	write := func(refs map[string]struct{}, stopAfter int) int {
		batch, err := m.ReplaceNodeGroups(ctx, new(refcount.Batch), "n1", nil, refs)
		require.NoError(t, err)
		sl := batch.Slices(slice)
		for i, x := range sl {
			if i == stopAfter {
				break
			}
			require.NoError(t, m.Commit(ctx, x))
		}
		return len(sl)
	}
	require.Greater(t, write(a, -1), 1, "a replace of %d references is more than one slice", n)
	require.Equal(t, sorted(keys(a)), sorted(nodeRefs(t, s, "n1")))

	total := write(b, 1) // a shutdown after the first slice
	require.Greater(t, total, 2)
	stored := nodeRefs(t, s, "n1")
	var asA, asB int
	for i := range synchash.Buckets {
		got, inA, inB := inBucket(stored, i), inBucket(keys(a), i), inBucket(keys(b), i)
		switch {
		case slices.Equal(got, inB) && !slices.Equal(got, inA):
			asB++
		case slices.Equal(got, inA):
			asA++
		default:
			t.Fatalf("bucket %d is neither as it was nor as the journal says", i)
		}
	}
	require.Positive(t, asB, "the first slice landed")
	require.Positive(t, asA, "the rest did not")

	write(b, -1) // the next sync
	require.Equal(t, sorted(keys(b)), sorted(nodeRefs(t, s, "n1")))
}

func keys(m map[string]struct{}) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

func nodeRefs(t *testing.T, s refcount.Storage, node string) []string {
	t.Helper()
	refs, err := s.NodeRefs(t.Context(), node)
	require.NoError(t, err)
	return refs
}

// inBucket returns the IDs of bucket i, sorted.
func inBucket(ids []string, i int) []string {
	var out []string
	for _, id := range ids {
		if synchash.Bucket(id) == i {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return out
}

func sorted(s []string) []string {
	slices.Sort(s)
	return s
}
