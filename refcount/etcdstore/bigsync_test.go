package etcdstore_test

import (
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sharedcontent/sharedcontent/internal/synchash"
	"github.com/sharedcontent/sharedcontent/internal/testutil/etcdtest"
	"github.com/sharedcontent/sharedcontent/refcount"
	"github.com/sharedcontent/sharedcontent/refcount/etcdstore"
)

// TestBigSyncOnEtcd: a node's full syncs written as the coordinator
// writes them (docs/design.md §7.1: the references in groups that fit,
// refcount.Manager.ReplaceNodeGroups, then the member record in a group
// of its own), against etcd's default limit of 128 writes per
// transaction. A node of 20,000 references whose journal then swaps
// 10,000 of them for 10,000 others syncs in one go; so does a node whose
// 600 references in 4 buckets are swapped for 600 others there (150
// drops and 150 additions in each bucket: more than a group holds both
// ways, which failed whole before). The store and the nodes' hashes hold
// exactly their journals, as a new leader builds them too.
func TestBigSyncOnEtcd(t *testing.T) {
	c := etcdtest.Start(t, etcdtest.Options{Members: 1})
	s := newLeaders(c.Client(t)).campaign(t, "/bigsync/", etcdstore.Options{})
	ctx := t.Context()
	m := refcount.NewManager(s)

	journal := func(prefix string, from, n int) map[string]struct{} {
		out := make(map[string]struct{}, n)
		for i := from; i < from+n; i++ {
			out[fmt.Sprintf("sha256:%s%08d", prefix, i)] = struct{}{}
		}
		return out
	}
	sync := func(node, name string, refs map[string]struct{}) {
		t.Helper()
		start := time.Now()
		b, err := m.ReplaceNodeGroups(ctx, new(refcount.Batch), node, nil, refs)
		require.NoError(t, err, name)
		groups := len(b.Groups())
		b.Break().PutMember(refcount.Member{ID: node, Generation: "g1"})
		require.NoError(t, m.Commit(ctx, b), "%s: %d groups", name, groups)
		stored, err := s.NodeRefs(ctx, node)
		require.NoError(t, err)
		require.Equal(t, slices.Sorted(maps.Keys(refs)), slices.Sorted(slices.Values(stored)), name)
		h, ok := m.NodeHash(node)
		require.True(t, ok, "%s: the node's hash is offered", name)
		require.Equal(t, *synchash.FromIDs(stored), h, name)
		t.Logf("%s: %d references, %d groups, %v", name, len(refs), groups, time.Since(start).Round(time.Millisecond))
	}
	// The node's 20,000 references, written straight to the store (the
	// setup, not under test); the Manager then builds the hashes, as a
	// leader does at its start.
	first := journal("a", 0, 20000)
	b := new(refcount.Batch)
	for id := range first {
		b.AddRef(id, "node-big")
		if b.Len()%refcount.GroupRefs == 0 {
			b.Break()
		}
	}
	require.NoError(t, s.Commit(ctx, b))
	require.NoError(t, m.BuildHashes(ctx))
	swapped := journal("a", 0, 10000)
	maps.Copy(swapped, journal("b", 0, 10000))
	sync("node-big", "10,000 added, 10,000 dropped", swapped)

	sync("node-crowded", "first sync, 4 buckets", crowded("a", 4, 600))
	sync("node-crowded", "600 added, 600 dropped in 4 buckets", crowded("b", 4, 600))

	fresh := refcount.NewManager(s) // a new leader's view
	require.NoError(t, fresh.BuildHashes(ctx))
	for _, node := range []string{"node-big", "node-crowded"} {
		want, _ := m.NodeHash(node)
		got, ok := fresh.NodeHash(node)
		require.True(t, ok)
		require.Equal(t, want, got, node)
	}
}

// crowded returns n resource IDs named after prefix in the first buckets
// buckets (synchash.Bucket).
func crowded(prefix string, buckets, n int) map[string]struct{} {
	out := map[string]struct{}{}
	for i := 0; len(out) < n; i++ {
		if id := fmt.Sprintf("sha256:%s%07d", prefix, i); synchash.Bucket(id) < buckets {
			out[id] = struct{}{}
		}
	}
	return out
}
