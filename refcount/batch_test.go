package refcount_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sharedcontent/sharedcontent/refcount"
)

// groupKeys returns the keys of each group of b.
func groupKeys(b *refcount.Batch) [][]string {
	var out [][]string
	for _, g := range b.Groups() {
		var keys []string
		for _, op := range g {
			keys = append(keys, op.Key)
		}
		out = append(out, keys)
	}
	return out
}

func TestBatchGroups(t *testing.T) {
	require.Empty(t, new(refcount.Batch).Groups())
	require.Empty(t, new(refcount.Batch).Break().Groups(), "a Break at the start does nothing")

	b := new(refcount.Batch).DropDeleted("a").DropDeleted("b")
	require.Equal(t, [][]string{{"a", "b"}}, groupKeys(b), "without Break, one group")

	b = new(refcount.Batch).Break().DropDeleting("a").PutDeleted("a", refcount.DeleteCompletion{}).Break().Break().
		DropDeleting("b").PutDeleted("b", refcount.DeleteCompletion{}).Break()
	require.Equal(t, [][]string{{"a", "a"}, {"b", "b"}}, groupKeys(b))
	require.Equal(t, 4, b.Len())
}

// TestBatchAppend: an appended batch keeps its own groups, after those
// of the batch it is appended to.
func TestBatchAppend(t *testing.T) {
	a := new(refcount.Batch).DropDeleted("a1").DropDeleted("a2")
	o := new(refcount.Batch).DropDeleted("o1").Break().DropDeleted("o2").DropDeleted("o3").Break()
	a.Append(o).Append(new(refcount.Batch)).Append(new(refcount.Batch).DropDeleted("z"))
	require.Equal(t, [][]string{{"a1", "a2"}, {"o1"}, {"o2", "o3"}, {"z"}}, groupKeys(a))
	require.Equal(t, [][]string{{"o1"}, {"o2", "o3"}}, groupKeys(o), "the appended batch is unchanged")
}

// TestBatchGrow: after Grow(n), n writes added one at a time, each its
// own group, are not copied (the array stays where it is) and read as
// they would without it.
func TestBatchGrow(t *testing.T) {
	b := new(refcount.Batch).AddRef("r0", "n").Break()
	b.Grow(100)
	first := &b.Writes()[0]
	for i := range 100 {
		b.AddRef("r"+string(rune('a'+i%26)), "n").Break()
	}
	require.Same(t, first, &b.Writes()[0], "the writes were copied")
	require.Equal(t, 101, b.Len())
	require.Len(t, b.Groups(), 101)
}
