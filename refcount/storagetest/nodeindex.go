package storagetest

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sharedcontent/sharedcontent/internal/synchash"
	"github.com/sharedcontent/sharedcontent/refcount"
)

// model is what a store's reference sets must be: resource ID → nodes.
type model map[string]map[string]bool

func (m model) add(id, node string) {
	if m[id] == nil {
		m[id] = map[string]bool{}
	}
	m[id][node] = true
}

func (m model) remove(id, node string) {
	delete(m[id], node)
	if len(m[id]) == 0 {
		delete(m, id)
	}
}

// replace is ReplaceNode(Buckets) on the model: buckets nil is all.
func (m model) replace(node string, buckets []int, refs map[string]struct{}) {
	for id := range m {
		if buckets == nil || slices.Contains(buckets, synchash.Bucket(id)) {
			if _, ok := refs[id]; !ok {
				m.remove(id, node)
			}
		}
	}
	for id := range refs {
		m.add(id, node)
	}
}

func (m model) clone() model {
	c := model{}
	for id, nodes := range m {
		c[id] = maps.Clone(nodes)
	}
	return c
}

// nodeRefs returns the resources each node references, sorted.
func (m model) nodeRefs() map[string][]string {
	out := map[string][]string{}
	for id, nodes := range m {
		for n := range nodes {
			out[n] = append(out[n], id)
		}
	}
	for n := range out {
		slices.Sort(out[n])
	}
	return out
}

// requireModel requires s's reference sets to be want, and each of
// nodes' references, read from the store's index (NodeRefs), to be what
// the sets say.
func requireModel(t *testing.T, s refcount.Storage, want model, nodes []string) {
	t.Helper()
	ids, got := list(t, s)
	wantIDs := slices.Sorted(maps.Keys(want))
	wantNodes := make([][]string, len(wantIDs))
	for i, id := range wantIDs {
		wantNodes[i] = slices.Sorted(maps.Keys(want[id]))
	}
	if len(ids) == 0 {
		ids, got = nil, nil
	}
	if len(wantIDs) == 0 {
		wantIDs, wantNodes = nil, nil
	}
	require.Equal(t, wantIDs, ids)
	require.Equal(t, wantNodes, got)
	byNode := want.nodeRefs()
	for _, n := range nodes {
		refs, err := s.NodeRefs(t.Context(), n)
		require.NoError(t, err)
		require.Equal(t, byNode[n], nilIfEmpty(refs), "node %s's references", n)
	}
}

func nilIfEmpty(s []string) []string {
	if len(s) == 0 {
		return nil
	}
	return s
}

// indexIDs returns resource IDs that share few buckets, so that a
// ReplaceNodeBuckets replaces several references and leaves others: 4
// buckets of 4 IDs each, and 8 IDs anywhere.
func indexIDs() []string {
	var ids []string
	per := map[int]int{}
	spread := 0
	for i := 0; len(ids) < 24; i++ {
		id := fmt.Sprintf("sha256:%04d", i)
		b := synchash.Bucket(id)
		switch {
		case per[b] > 0 && per[b] < 4, per[b] == 0 && len(per) < 4:
			per[b]++
			ids = append(ids, id)
		case spread < 8 && per[b] == 0:
			spread++
			ids = append(ids, id)
		}
	}
	return ids
}

// testNodeIndex: after every kind of write, in any order and mix, a
// node's references are exactly what the reference sets say: a
// ReplaceNode or a forget (ReplaceNode(node, nil)) leaves no reference of
// the node it should have dropped, whatever wrote it (AddRef, RemoveRef,
// DropRefs, ReplaceNode, ReplaceNodeBuckets, several in one batch), and a
// batch that fails writes nothing to the node's references either. Every
// store keeps a per-node index, which must keep in step with the sets; it
// is also read directly (NodeRefs).
func testNodeIndex(t *testing.T, s refcount.Storage) {
	ctx := t.Context()
	ids := indexIDs()
	nodes := []string{"n0", "n1", "n2", "n3", "n4"}
	rng := rand.New(rand.NewPCG(26, 3))
	want := model{}
	someRefs := func(within []int) map[string]struct{} {
		refs := map[string]struct{}{}
		for _, id := range ids {
			if (within == nil || slices.Contains(within, synchash.Bucket(id))) && rng.IntN(3) == 0 {
				refs[id] = struct{}{}
			}
		}
		return refs
	}
	// write adds one random write to b and applies it to m.
	write := func(b *refcount.Batch, m model) {
		id, node := ids[rng.IntN(len(ids))], nodes[rng.IntN(len(nodes))]
		switch rng.IntN(7) {
		case 0, 1:
			b.AddRef(id, node)
			m.add(id, node)
		case 2:
			b.RemoveRef(id, node)
			m.remove(id, node)
		case 3:
			b.DropRefs(id)
			delete(m, id)
		case 4:
			refs := someRefs(nil)
			b.ReplaceNode(node, refs)
			m.replace(node, nil, refs)
		case 5:
			buckets := []int{synchash.Bucket(id), synchash.Bucket(ids[rng.IntN(len(ids))])}
			refs := someRefs(buckets)
			b.ReplaceNodeBuckets(node, buckets, refs)
			m.replace(node, buckets, refs)
		case 6:
			b.ReplaceNode(node, nil).DeleteMember(node)
			m.replace(node, nil, nil)
		}
	}
	for step := range 120 {
		b := new(refcount.Batch)
		next := want.clone()
		for range 1 + rng.IntN(4) {
			write(b, next)
		}
		if step%10 == 9 {
			// A write that cannot be made, last: the batch writes nothing.
			b.AddRef(ids[0], "")
			require.Error(t, s.Commit(ctx, b), "step %d", step)
		} else {
			commit(t, s, b)
			want = next
		}
		requireModel(t, s, want, nodes)
	}
	// Forgetting every node, one at a time, leaves nothing.
	for _, n := range nodes {
		commit(t, s, new(refcount.Batch).ReplaceNode(n, nil))
		want.replace(n, nil, nil)
		requireModel(t, s, want, nodes)
	}
	require.Empty(t, want)
}

// testNodeIndexTakeOver: the Commits of a handle that was taken over
// write nothing to the nodes' references either: the newer handle's
// replaces and forgets afterwards leave exactly what they should.
func testNodeIndexTakeOver(t *testing.T, s1 refcount.Storage, takeOver func(*testing.T, refcount.Storage) refcount.Storage) {
	ctx := t.Context()
	nodes := []string{"a", "b"}
	commit(t, s1, refs("r1", "a", "b").AddRef("r2", "a").AddRef("r3", "b"))
	s2 := takeOver(t, s1)
	for _, b := range []*refcount.Batch{
		refs("r4", "a"),
		new(refcount.Batch).RemoveRef("r1", "a"),
		new(refcount.Batch).DropRefs("r2"),
		new(refcount.Batch).ReplaceNode("b", map[string]struct{}{"r5": {}}),
		new(refcount.Batch).ReplaceNodeBuckets("a", []int{synchash.Bucket("r2")}, nil),
		new(refcount.Batch).ReplaceNode("a", nil),
	} {
		require.ErrorIs(t, s1.Commit(ctx, b), refcount.ErrFenced)
	}
	want := model{"r1": {"a": true, "b": true}, "r2": {"a": true}, "r3": {"b": true}}
	requireModel(t, s2, want, nodes)
	commit(t, s2, new(refcount.Batch).ReplaceNode("a", map[string]struct{}{"r4": {}}))
	want.replace("a", nil, map[string]struct{}{"r4": {}})
	requireModel(t, s2, want, nodes)
	commit(t, s2, new(refcount.Batch).ReplaceNode("b", nil).ReplaceNode("a", nil))
	requireModel(t, s2, model{}, nodes)
}
