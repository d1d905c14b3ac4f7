package etcdstore_test

import (
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sharedcontent/sharedcontent/internal/synchash"
	"github.com/sharedcontent/sharedcontent/refcount"
	"github.com/sharedcontent/sharedcontent/refcount/etcdstore"
)

// testManager: the Manager over the etcd store, as the coordinator uses
// it: concurrent adds to one hot set count every node once, a whole
// ReplaceNode through it leaves the set and the node's hash as the
// references it names, and the hashes it keeps match a fresh build.
func testManager(t *testing.T, l *leaders) {
	ctx := t.Context()
	s := l.campaign(t, fmt.Sprintf("/test/%s/", t.Name()), etcdstore.Options{})
	m := refcount.NewManager(s)
	require.NoError(t, m.BuildHashes(ctx))
	var wg sync.WaitGroup
	for n := range 16 {
		wg.Go(func() {
			for range 2 { // the second add writes nothing
				if _, err := m.AddRef(ctx, "hot", fmt.Sprintf("n%02d", n)); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	rc, err := m.Refs(ctx, "hot")
	require.NoError(t, err)
	require.Equal(t, 16, rc.Len())

	refs := map[string]struct{}{"a": {}, "b": {}}
	require.NoError(t, m.ReplaceNode(ctx, "n00", refs))
	h, ok := m.NodeHash("n00")
	require.True(t, ok)
	require.Equal(t, *synchash.FromIDs([]string{"a", "b"}), h)
	rc, err = m.Refs(ctx, "hot")
	require.NoError(t, err)
	require.Equal(t, 15, rc.Len(), "n00 left the hot set")

	fresh := refcount.NewManager(s)
	require.NoError(t, fresh.BuildHashes(ctx))
	for n := range 16 {
		id := fmt.Sprintf("n%02d", n)
		want, _ := m.NodeHash(id)
		got, ok := fresh.NodeHash(id)
		require.True(t, ok)
		require.Equal(t, want, got, id)
	}
}
