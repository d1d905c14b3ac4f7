package storagetest

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sharedcontent/sharedcontent/refcount"
)

// testRefState: RefState's answer follows every write to the set, and
// an absent set is (false, 0).
func testRefState(t *testing.T, s refcount.Storage) {
	ctx := t.Context()
	state := func(id, node string) (bool, int) {
		t.Helper()
		has, n, err := s.RefState(ctx, id, node)
		require.NoError(t, err)
		return has, n
	}
	has, n := state("r1", "a")
	require.False(t, has)
	require.Zero(t, n)
	commit(t, s, refs("r1", "a", "b", "a"))
	has, n = state("r1", "a")
	require.True(t, has)
	require.Equal(t, 2, n, "a node added twice counts once")
	has, n = state("r1", "c")
	require.False(t, has)
	require.Equal(t, 2, n)
	commit(t, s, new(refcount.Batch).RemoveRef("r1", "a").RemoveRef("r1", "z"))
	has, n = state("r1", "a")
	require.False(t, has)
	require.Equal(t, 1, n)
	commit(t, s, new(refcount.Batch).ReplaceNode("b", nil).AddRef("r2", "b"))
	_, n = state("r1", "b")
	require.Zero(t, n, "the emptied set is dropped")
	commit(t, s, new(refcount.Batch).DropRefs("r2"))
	has, n = state("r2", "b")
	require.False(t, has)
	require.Zero(t, n)
}

// testSubmit: Submit applies batches in the order they were submitted,
// and wait returns Commit's outcome.
func testSubmit(t *testing.T, s refcount.Storage) {
	ctx := t.Context()
	w1 := s.Submit(ctx, refs("r1", "a", "b"))
	w2 := s.Submit(ctx, new(refcount.Batch).RemoveRef("r1", "a"))
	w3 := s.Submit(ctx, new(refcount.Batch).AddRef("", "a"))
	require.NoError(t, w2())
	require.NoError(t, w1())
	require.Error(t, w3(), "an invalid write fails its own wait")
	rc, err := s.Get(ctx, "r1")
	require.NoError(t, err)
	require.Equal(t, []string{"b"}, rc.NodeList())
	require.NoError(t, s.Submit(ctx, new(refcount.Batch))(), "an empty batch")
}
