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
