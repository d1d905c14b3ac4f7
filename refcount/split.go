package refcount

import (
	"context"
	"slices"

	"github.com/sharedcontent/sharedcontent/internal/synchash"
)

// GroupRefs is the most references one atomic group written by
// ReplaceNodeGroups changes: a store that keeps a reference as two keys
// (etcd: the set's and the node index's) writes two per reference, and
// MaxGroupWrites in all.
const GroupRefs = MaxGroupWrites / 2

// ReplaceNodeGroups appends to b the writes of b.ReplaceNode(node, refs),
// restricted to buckets when it is not nil (as ReplaceNodeBuckets), in
// atomic groups that a store with a limit per transaction can commit one
// after the other (docs/design.md §7.1, "Transactions"). A replace that
// changes at most GroupRefs references is one write, as before. A bigger
// one is cut by bucket (synchash.Bucket): consecutive buckets share a
// group while what they may change fits in GroupRefs, estimated from the
// node's hash (the references it holds in the bucket plus those refs
// names there); a bucket whose node hash is exact and equal to that of
// refs changes nothing and is left out. A bucket that alone does not fit
// gets its additions as AddRefs (only those the node lacks, where its
// stored references were read), GroupRefs to a group, then, when it may
// drop more than a group holds (the node holds more than GroupRefs there,
// or its count is not exact), its drops as RemoveRefs (read from the
// node's index: crowdedDrops), and its replace last, which is left to
// drop what changed since the read: so a bucket that swaps thousands of
// references for others fits too. Cut, the writes start and end with a
// Break.
//
// Any prefix of the groups leaves each of the node's references (in
// buckets) either as it was or as refs says: the AddRefs add only
// references of refs and the RemoveRefs drop only others. So a caller
// that writes the record that ends its operation (a member's generation,
// a member's deletion) after them, in a group of its own, leaves nothing
// claimed that is not stored. A bucket's replace, which makes it exactly
// refs's, comes after its AddRefs and RemoveRefs: stopped before it, the
// bucket's stored references (and so the hash a new leader builds from
// them, or the node's hash marked dirty by the failed Commit) differ from
// refs's unless they are already equal, and the next sync by hash sends
// the bucket again (docs/design.md §7.1). The estimate reads the
// node's hash now; a change that lands before the commit makes a group
// bigger or smaller than estimated, never the writes different.
//
// On a store that commits every batch whole (memory, bbolt) it is one
// write, unless it changes more than SliceRefs references: then it is
// cut by bucket into groups of about SliceRefs (replaceSlices), which its
// caller commits a slice at a time (Batch.Slices).
func (m *Manager) ReplaceNodeGroups(ctx context.Context, b *Batch, node string, buckets *BucketSet, refs map[string]struct{}) (*Batch, error) {
	if _, whole := m.storage.(wholeCommitter); whole {
		if len(refs)+m.heldRefs(node, buckets) <= sliceRefs {
			return replaceIn(b, node, buckets, refs), nil
		}
		return m.replaceSlices(b, node, buckets, refs), nil // slices.go
	}
	kept, exact, known := m.nodeTable(node)
	var fresh synchash.Table
	var ids [synchash.Buckets][]string
	for id := range refs {
		i := synchash.Bucket(id)
		fresh.Add(id)
		ids[i] = append(ids[i], id)
	}
	cost := func(i int) int {
		switch {
		case exact && kept[i] == fresh[i]:
			return 0
		case known:
			return len(ids[i]) + int(kept[i].Count)
		}
		return len(ids[i]) + GroupRefs // unknown: the bucket goes alone
	}
	total := 0
	for i := range synchash.Buckets {
		if buckets.HoldsBucket(i) {
			total += cost(i)
		}
	}
	if total <= GroupRefs {
		return replaceIn(b, node, buckets, refs), nil
	}
	// A bucket that goes alone may drop more than a group holds when the
	// node holds more than that there, or when its count is not exact.
	crowded := new(BucketSet)
	for i := range synchash.Buckets {
		crowded[i] = buckets.HoldsBucket(i) && cost(i) > GroupRefs && (!exact || int(kept[i].Count) > GroupRefs)
	}
	drops, held, err := m.crowdedDrops(ctx, node, crowded, &ids)
	if err != nil {
		return nil, err
	}
	b.Break()
	var group []int
	var groupRefs map[string]struct{}
	groupCost := 0
	flush := func() {
		if len(group) > 0 {
			b.ReplaceNodeBuckets(node, group, groupRefs).Break()
		}
		group, groupRefs, groupCost = nil, map[string]struct{}{}, 0
	}
	flush()
	for i := range synchash.Buckets {
		c := cost(i)
		if !buckets.HoldsBucket(i) || c == 0 && exact {
			continue
		}
		if c > GroupRefs {
			flush()
			// Only what the node does not hold yet, where its stored
			// references were read.
			adds := slices.DeleteFunc(slices.Clone(ids[i]), func(id string) bool { return held[id] })
			slices.Sort(adds)
			for chunk := range slices.Chunk(adds, GroupRefs) {
				for _, id := range chunk {
					b.AddRef(id, node)
				}
				b.Break()
			}
			for chunk := range slices.Chunk(drops[i], GroupRefs) {
				for _, id := range chunk {
					b.RemoveRef(id, node)
				}
				b.Break()
			}
		} else if groupCost+c > GroupRefs {
			flush()
		}
		group = append(group, i)
		groupCost += c
		for _, id := range ids[i] {
			groupRefs[id] = struct{}{}
		}
		if c > GroupRefs {
			flush()
		}
	}
	flush()
	return b, nil
}

// crowdedDrops returns, for each crowded bucket (one where the node may
// drop more than GroupRefs references: a forget of a big node, a sync
// that swaps thousands of references for others, however many it also
// adds), the node's stored references there that ids does not name, and
// the set of those it does name (held already: no AddRef needed), read
// from the store's index by node (Storage.NodeRefs). So the
// bucket's drops go as RemoveRefs, GroupRefs to a group, before its
// replace, which is left to drop what changed since the read.
func (m *Manager) crowdedDrops(ctx context.Context, node string, crowded *BucketSet, ids *[synchash.Buckets][]string) (drops map[int][]string, held map[string]bool, err error) {
	if len(crowded.List()) == 0 {
		return nil, nil, nil
	}
	named := map[string]bool{}
	for i, in := range crowded {
		if in {
			for _, id := range ids[i] {
				named[id] = true
			}
		}
	}
	drops, held = map[int][]string{}, map[string]bool{}
	note := func(id string) {
		switch i := synchash.Bucket(id); {
		case !crowded[i]:
		case named[id]:
			held[id] = true
		default:
			drops[i] = append(drops[i], id)
		}
	}
	refs, err := m.storage.NodeRefs(ctx, node)
	if err != nil {
		return nil, nil, err
	}
	for _, id := range refs {
		note(id)
	}
	return drops, held, nil
}

// replaceIn appends one replace of node's references in buckets (nil:
// all) to b.
func replaceIn(b *Batch, node string, buckets *BucketSet, refs map[string]struct{}) *Batch {
	if buckets == nil {
		return b.ReplaceNode(node, refs)
	}
	return b.ReplaceNodeBuckets(node, buckets.List(), refs)
}

// wholeCommitter is a store that commits every batch in one transaction,
// however big.
type wholeCommitter interface{ commitsWhole() }

func (*memoryStorage) commitsWhole() {}
func (*BoltStorage) commitsWhole()   {}

// HoldsBucket reports whether bucket i is in the set; a nil set holds every
// bucket.
func (s *BucketSet) HoldsBucket(i int) bool { return s == nil || s[i] }

// nodeTable returns a copy of node's hash, whether it is exact (built and
// not missing a reference: NodeHash) and whether it is known at all (the
// hashes are built; a dirty node's counts may miss a few references).
func (m *Manager) nodeTable(node string) (t synchash.Table, exact, known bool) {
	m.hashes.mu.Lock()
	defer m.hashes.mu.Unlock()
	if !m.hashes.built {
		return t, false, false
	}
	if p := m.hashes.byNode[node]; p != nil {
		t = *p
	}
	return t, !m.hashes.dirty[node], true
}
