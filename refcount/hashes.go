package refcount

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"

	"github.com/sharedcontent/sharedcontent/internal/synchash"
)

// hashListPage is the page size of the walk that builds the hashes. It
// is large because etcd counts every key from a range read's start to
// the end of the prefix, whatever its limit: the walk costs O(keys²/keys
// per read) there (BenchmarkTakeOver in refcount/etcdstore: 100,000
// references 1.33 s with pages of 1,000, 0.35 s with 10,000).
const hashListPage = 10000

// nodeHashes is, per node, the hash of the resource IDs it references
// (synchash.Table), kept by the Manager on every write it makes: what a
// sync by hash compares with the node's journal (docs/design.md §10).
type nodeHashes struct {
	mu     sync.Mutex
	built  bool
	byNode map[string]*synchash.Table // protected by mu
	// dirty are the nodes whose hash may miss a reference: one added by
	// AddRefOrdered, whose write is ordered outside the stripes and so
	// cannot be accounted exactly here. Their hash is not offered
	// (NodeHash) until a whole ReplaceNode of the node sets it anew.
	dirty map[string]bool // protected by mu
}

// BuildHashes computes every node's hash with one walk of the stored
// reference sets (O(references)), holding every stripe meanwhile so that
// no write is missed; from then on the Manager keeps them up to date.
// A coordinator calls it once, when it starts, before it answers
// (docs/design.md §10.4), so it reads each set as its list of nodes
// (ListNodes: no Set built) and hashes each resource ID once, not once
// per node that references it.
func (m *Manager) BuildHashes(ctx context.Context) error {
	unlock := m.lockBatch(new(Batch).ReplaceNode("*", nil)) // every stripe
	defer unlock()
	byNode := map[string]*synchash.Table{}
	after := ""
	for {
		page, err := m.ListNodes(ctx, after, hashListPage)
		if err != nil {
			return err
		}
		for _, e := range page {
			b, h := synchash.Of(e.ResourceID)
			for _, n := range e.Nodes {
				t := byNode[n]
				if t == nil {
					t = new(synchash.Table)
					byNode[n] = t
				}
				t[b].Count++ // t.Add(e.ResourceID), its hash computed once
				t[b].Hash += h
			}
		}
		if len(page) < hashListPage {
			break
		}
		after = page[len(page)-1].ResourceID
	}
	m.hashes.mu.Lock()
	m.hashes.byNode, m.hashes.dirty, m.hashes.built = byNode, map[string]bool{}, true
	m.hashes.mu.Unlock()
	return nil
}

// NodeHash returns the hash of the node's references, and false when
// BuildHashes has not run or the node's hash may miss a reference (a
// reference added by AddRefOrdered since the node's last whole
// ReplaceNode): a sync of it then sends the whole journal.
func (m *Manager) NodeHash(node string) (synchash.Table, bool) {
	m.hashes.mu.Lock()
	defer m.hashes.mu.Unlock()
	if !m.hashes.built || m.hashes.dirty[node] {
		return synchash.Table{}, false
	}
	if t := m.hashes.byNode[node]; t != nil {
		return *t, true
	}
	return synchash.Table{}, true
}

// hashChange is one change of the hashes, applied once its write is
// committed.
type hashChange func(h *nodeHashes)

// applyHashes applies changes in order. Callers hold the stripes of the
// writes the changes come from.
func (m *Manager) applyHashes(changes []hashChange) {
	if len(changes) == 0 {
		return
	}
	m.hashes.mu.Lock()
	defer m.hashes.mu.Unlock()
	if !m.hashes.built {
		return
	}
	for _, c := range changes {
		c(&m.hashes)
	}
}

// markDirty records that node's hash may miss a reference from now on.
func (m *Manager) markDirty(node string) {
	m.hashes.mu.Lock()
	defer m.hashes.mu.Unlock()
	if m.hashes.built {
		m.hashes.dirty[node] = true
	}
}

// refChange returns the change of node's hash by one added (or dropped)
// reference to resourceID.
func refChange(resourceID, node string, add bool) hashChange {
	return func(h *nodeHashes) {
		byNode := h.byNode
		t := byNode[node]
		if t == nil {
			t = new(synchash.Table)
			byNode[node] = t
		}
		if add {
			t.Add(resourceID)
		} else {
			t.Remove(resourceID)
		}
		if t.Empty() {
			delete(byNode, node)
		}
	}
}

// replaceChange returns the change of node's hash by a ReplaceNode: the
// buckets it replaces (all without buckets) become those of refs.
func replaceChange(node string, buckets *BucketSet, refs map[string]struct{}) hashChange {
	var fresh synchash.Table
	for id := range refs {
		fresh.Add(id)
	}
	return func(h *nodeHashes) {
		byNode := h.byNode
		if buckets == nil {
			delete(h.dirty, node) // the whole hash is set anew
		}
		t := byNode[node]
		if t == nil {
			t = new(synchash.Table)
			byNode[node] = t
		}
		for i := range t {
			if buckets == nil || buckets[i] {
				t[i] = fresh[i]
			}
		}
		if t.Empty() {
			delete(byNode, node)
		}
	}
}

// batchHashes returns the hash changes of b's writes to reference sets,
// deciding each by whether the node is in the set as the stored state and
// b's earlier writes leave it (batchView), and the nodes whose references
// b changes. Callers hold the stripes of b. It reads no set whole but
// those b drops: on a RefStater, whether a node is in a set is one lookup
// (bbolt: O(log N)), so a first sync of R references costs O(R log N),
// not O(R·N) as when each set was read (issue 26: 175.6 s for the first
// syncs of 1,000 nodes × 1,000 references).
//
// A node whose references b replaces in every bucket, by one whole
// ReplaceNode or by bucket-restricted ones that together cover them all
// (ReplaceNodeGroups), has its whole hash set anew: it is no longer
// dirty.
func (m *Manager) batchHashes(ctx context.Context, b *Batch) ([]hashChange, []string, error) {
	m.hashes.mu.Lock()
	built := m.hashes.built
	m.hashes.mu.Unlock()
	if !built {
		return nil, nil, nil
	}
	if err := checkAll(b.ops); err != nil {
		return nil, nil, fmt.Errorf("refcount: commit: %w", err)
	}
	v := newBatchView(ctx, m.storage)
	// A node with more single writes than a group holds has its stored
	// references read whole, once, rather than one request per write.
	singles := map[string]int{}
	for i := range b.ops {
		if op := &b.ops[i]; op.Kind == OpAddRef || op.Kind == OpRemoveRef {
			singles[op.Node]++
		}
	}
	for node, n := range singles {
		if n > GroupRefs {
			if _, err := v.readNode(node); err != nil {
				return nil, nil, err
			}
		}
	}
	touched := map[string]bool{}
	covered := map[string]*BucketSet{} // the buckets b replaces, by node
	var out []hashChange
	for i := range b.ops {
		op := &b.ops[i]
		switch op.Kind {
		case OpAddRef, OpRemoveRef:
			has, err := v.has(op.Key, op.Node)
			if err != nil {
				return nil, nil, err
			}
			touched[op.Node] = true
			if add := op.Kind == OpAddRef; has != add {
				out = append(out, refChange(op.Key, op.Node, add))
				v.set(op.Key, op.Node, add)
			}
		case OpDropRefs:
			nodes, err := v.nodes(op.Key)
			if err != nil {
				return nil, nil, err
			}
			for _, n := range nodes {
				out = append(out, refChange(op.Key, n, false))
				touched[n] = true
			}
			v.drop(op.Key)
		case OpReplaceNode:
			touched[op.Node] = true
			c := covered[op.Node]
			if c == nil {
				c = new(BucketSet)
				covered[op.Node] = c
			}
			for i := range c {
				c[i] = c[i] || op.Buckets.HoldsBucket(i)
			}
			out = append(out, replaceChange(op.Node, op.Buckets, op.NodeRefs))
			v.replace(op.Node, op.Buckets, op.NodeRefs)
		}
	}
	for node, c := range covered {
		if !slices.Contains(c[:], false) {
			out = append(out, func(h *nodeHashes) { delete(h.dirty, node) })
		}
	}
	return out, slices.Sorted(maps.Keys(touched)), nil
}

// markAllDirty marks dirty the nodes whose references a failed Commit
// changes: it may have been applied in part (a store that commits a
// batch as several transactions), or later (etcd, after a timeout), so
// their hashes may no longer be what is stored.
func (m *Manager) markAllDirty(nodes []string) {
	for _, n := range nodes {
		m.markDirty(n)
	}
}
