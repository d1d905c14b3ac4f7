package refcount

import "github.com/sharedcontent/sharedcontent/internal/synchash"

// A big sync's write in bounded transactions (docs/design.md §10.5). A
// store that commits every batch whole (bbolt) would write a node's
// 1,000,000 references in one transaction: tens of seconds holding the
// store's single writer and every refcount stripe, during which no other
// node's reference is written and a shutdown cannot stop it. So a replace
// of more than SliceRefs references is cut by bucket, as for a store with
// a limit per transaction (ReplaceNodeGroups), into groups of at most
// about SliceRefs, and its caller commits the batch a slice at a time
// (Slices), each slice one transaction.

// SliceRefs bounds the references one slice of a big write changes.
const SliceRefs = 25_000

// sliceRefs is the bound replaceSlices cuts by: SliceRefs (tests lower
// it).
var sliceRefs = SliceRefs

// replaceSlices appends to b node's replace in buckets (nil: all) as
// bucket-restricted replaces, each an atomic group of consecutive buckets
// whose references in refs plus those the node holds there (from its
// hash, when the hashes are built) fit in SliceRefs; a bucket that alone
// does not fit goes alone. Any prefix of the groups leaves each bucket
// either as it was or exactly as refs says there (ReplaceNodeGroups'
// rule).
func (m *Manager) replaceSlices(b *Batch, node string, buckets *BucketSet, refs map[string]struct{}) *Batch {
	kept, _, _ := m.nodeTable(node)
	var ids [synchash.Buckets]map[string]struct{}
	for id := range refs {
		i := synchash.Bucket(id)
		if ids[i] == nil {
			ids[i] = map[string]struct{}{}
		}
		ids[i][id] = struct{}{}
	}
	b.Break()
	var group []int
	groupRefs, cost := map[string]struct{}{}, 0
	flush := func() {
		if len(group) > 0 {
			b.ReplaceNodeBuckets(node, group, groupRefs).Break()
		}
		group, groupRefs, cost = nil, map[string]struct{}{}, 0
	}
	for i := range synchash.Buckets {
		if !buckets.HoldsBucket(i) {
			continue
		}
		c := len(ids[i]) + int(kept[i].Count)
		if cost+c > sliceRefs {
			flush()
		}
		group = append(group, i)
		cost += c
		for id := range ids[i] {
			groupRefs[id] = struct{}{}
		}
	}
	flush()
	return b
}

// Slices cuts b into batches of consecutive atomic groups that each
// change at most maxRefs references (a replace counts the references it
// names, any other write one), a group that alone changes more in a
// batch of its own. Committed one after the other, they write b.
func (b *Batch) Slices(maxRefs int) []*Batch {
	var out []*Batch
	cur, weight := new(Batch), 0
	for _, g := range b.Groups() {
		w := 0
		for i := range g {
			w += max(1, len(g[i].NodeRefs))
		}
		if weight > 0 && weight+w > maxRefs {
			out = append(out, cur)
			cur, weight = new(Batch), 0
		}
		for _, op := range g {
			cur.add(op)
		}
		cur.Break()
		weight += w
	}
	if cur.Len() > 0 {
		out = append(out, cur)
	}
	return out
}

// heldRefs is how many references node holds in buckets (nil: all), by
// its hash; 0 when the hashes are not built.
func (m *Manager) heldRefs(node string, buckets *BucketSet) int {
	kept, _, _ := m.nodeTable(node)
	n := 0
	for i := range synchash.Buckets {
		if buckets.HoldsBucket(i) {
			n += int(kept[i].Count)
		}
	}
	return n
}
