package refcount_test

import (
	"fmt"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sharedcontent/sharedcontent/refcount"
)

// TestBoltAddRefOrderedReadsNothing (docs/design.md §10.6): an add
// through AddRefOrdered on bbolt learns whether it changed the set and
// the set's size in its own write transaction, and opens no read
// transaction, whether the node is new to the set or there already.
func TestBoltAddRefOrderedReadsNothing(t *testing.T) {
	s := openBolt(t, filepath.Join(t.TempDir(), "refcount.db"))
	m := refcount.NewManager(s)
	ctx := t.Context()
	const res = "sha256:aaaa"
	for i := range 3 {
		before := refcount.ReadTxns(s)
		n, err := m.AddRefOrdered(ctx, res, fmt.Sprintf("node-%d", i))()
		require.NoError(t, err)
		require.Equal(t, i+1, n, "the set's size after add %d", i)
		require.Equal(t, before, refcount.ReadTxns(s), "add %d opened a read transaction", i)
	}
	before := refcount.ReadTxns(s)
	n, err := m.AddRefOrdered(ctx, res, "node-1")()
	require.NoError(t, err)
	require.Equal(t, 3, n, "a node already there changes nothing")
	require.Equal(t, before, refcount.ReadTxns(s), "the repeated add opened a read transaction")

	has, count, err := s.RefState(ctx, res, "node-2")
	require.NoError(t, err)
	require.True(t, has)
	require.Equal(t, 3, count)
	refs, err := s.NodeRefs(ctx, "node-2")
	require.NoError(t, err)
	require.Equal(t, []string{res}, refs, "the per-node index has the add")
}
