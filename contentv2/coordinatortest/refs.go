package coordinatortest

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sharedcontent/sharedcontent/lockserver/api"
)

// testAddRefWithoutSession: a reference of a node without a live session
// is ErrNoSession and recorded nowhere; once the node has opened its
// session, the same call is recorded.
func testAddRefWithoutSession(t *testing.T, c Cluster) {
	n := c.Node(t, "node-1")
	require.ErrorIs(t, n.AddRef(t.Context(), blob(1), false), api.ErrNoSession)
	require.Empty(t, refs(t, n))

	open(t, n, "i1")
	require.NoError(t, n.AddRef(t.Context(), blob(1), false))
	require.Equal(t, map[string][]string{blob(1).String(): {"node-1"}}, refs(t, n))
}

// testAddRefWhileDeleting: a reference is ErrDeleting while a delete of
// the blob is held; after the delete succeeded, a reference to a blob the
// node found (rather than committed) is ErrDeleting too, since its view
// may be stale (docs/design.md §8.9), and a committed one is recorded.
func testAddRefWhileDeleting(t *testing.T, c Cluster) {
	ctx := t.Context()
	ns := members(t, c, 2)
	n1, n2 := ns[0], ns[1]

	d := lock(t, n1, del(blob(1)))
	require.ErrorIs(t, n2.AddRef(ctx, blob(1), false), api.ErrDeleting, "a delete is in flight")
	require.NoError(t, d.Unlock(ctx, true, nil))
	require.ErrorIs(t, n2.AddRef(ctx, blob(1), true), api.ErrDeleting, "found right after its delete")
	require.Empty(t, refs(t, n2))
	require.NoError(t, n2.AddRef(ctx, blob(1), false), "committed anew")
	require.Equal(t, map[string][]string{blob(1).String(): {"node-2"}}, refs(t, n2))
	require.NoError(t, n1.AddRef(ctx, blob(1), true), "found after a reference since the delete")
}

// testRefsInOrder: Refs walks every reference set in resource ID order,
// each set's nodes sorted, and stops at fn's error, which it returns.
func testRefsInOrder(t *testing.T, c Cluster) {
	n1, n2 := c.Node(t, "node-1"), c.Node(t, "node-2")
	join(t, n2, "i2", blob(1), blob(2), blob(3))
	join(t, n1, "i1", blob(2))
	var seen []string
	require.NoError(t, n1.Refs(t.Context(), func(resource string, nodes []string) error {
		seen = append(seen, resource)
		if resource == blob(2).String() {
			require.Equal(t, []string{"node-1", "node-2"}, nodes)
		}
		return nil
	}))
	require.Len(t, seen, 3)
	require.IsIncreasing(t, seen)

	stop := errors.New("stop")
	calls := 0
	err := n1.Refs(t.Context(), func(string, []string) error { calls++; return stop })
	require.ErrorIs(t, err, stop)
	require.Equal(t, 1, calls)
}
