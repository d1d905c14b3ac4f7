package refcount

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"

	"github.com/sharedcontent/sharedcontent/internal/synchash"
)

// hashListPage is the page size of the walk that builds the hashes: a
// page is few round trips (on etcd, reads of windows of 20,000 keys,
// each costing O(its window): refcount/etcdstore's window.go).
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
	// source gives the next BuildHashes its hashes (WarmHashes); how
	// and warmErr are how the last one got them (HashesBuilt).
	source  HashSource // protected by mu
	how     string     // protected by mu
	warmErr error      // protected by mu
}

// HashSource gives every node's hash of the stored references without
// a walk: a standby keeps them current from etcd's watch
// (etcdstore.Warm, docs/design.md §7.2).
type HashSource interface {
	// NodeHashes returns every node's hash of the stored references as
	// they were at a point after the call began: every write committed
	// before the call is in them. An error means the caller must walk.
	NodeHashes(ctx context.Context) (map[string]*synchash.Table, error)
}

// How BuildHashes got the hashes (HashesBuilt).
const (
	HashesWalk = "walk" // a walk of every stored reference set
	HashesWarm = "warm" // a HashSource's
)

// WarmHashes makes the next BuildHashes take the hashes from src rather
// than walk, when src gives them. Call it before BuildHashes.
func (m *Manager) WarmHashes(src HashSource) {
	m.hashes.mu.Lock()
	defer m.hashes.mu.Unlock()
	m.hashes.source = src
}

// HashesBuilt returns how the last BuildHashes got the hashes (HashesWalk
// or HashesWarm; "" before one succeeded) and, when it walked although a
// HashSource was given, why that failed.
func (m *Manager) HashesBuilt() (how string, warmErr error) {
	m.hashes.mu.Lock()
	defer m.hashes.mu.Unlock()
	return m.hashes.how, m.hashes.warmErr
}

// BuildHashes computes every node's hash with one walk of the stored
// reference sets (O(references)), holding every stripe meanwhile so that
// no write is missed; from then on the Manager keeps them up to date.
// A coordinator calls it once, when it starts, before it answers
// (docs/design.md §10.4), so it reads each set as its list of nodes
// (ListNodes: no Set built) and hashes each resource ID once, not once
// per node that references it. With a HashSource (WarmHashes) it takes
// that source's hashes instead, and walks only when the source fails:
// the caller holds that no other writer changes the references
// meanwhile (a new leader, after its first guarded write).
func (m *Manager) BuildHashes(ctx context.Context) error {
	unlock := m.lockBatch(new(Batch).ReplaceNode("*", nil)) // every stripe
	defer unlock()
	m.hashes.mu.Lock()
	src := m.hashes.source
	m.hashes.source = nil
	m.hashes.mu.Unlock()
	var warmErr error
	if src != nil {
		byNode, err := src.NodeHashes(ctx)
		if err == nil {
			m.setHashes(byNode, HashesWarm, nil)
			return nil
		}
		warmErr = err
	}
	byNode, err := m.walkHashes(ctx)
	if err != nil {
		return err
	}
	m.setHashes(byNode, HashesWalk, warmErr)
	return nil
}

// setHashes installs every node's hash: none is dirty.
func (m *Manager) setHashes(byNode map[string]*synchash.Table, how string, warmErr error) {
	m.hashes.mu.Lock()
	defer m.hashes.mu.Unlock()
	m.hashes.byNode, m.hashes.dirty, m.hashes.built = byNode, map[string]bool{}, true
	m.hashes.how, m.hashes.warmErr = how, warmErr
}

// walkHashes computes every node's hash from the stored reference sets:
// streamed from a SetWalker (bbolt), so that what it holds is the nodes'
// tables (4 KiB a node), not pages of sets (a page of 10,000 sets of 500
// nodes each was 5M node names); else a page at a time.
func (m *Manager) walkHashes(ctx context.Context) (map[string]*synchash.Table, error) {
	byNode := map[string]*synchash.Table{}
	if w, ok := m.storage.(SetWalker); ok {
		err := w.WalkSets(ctx, func(id []byte, nodes [][]byte) error {
			b, h := synchash.Of(string(id))
			for _, n := range nodes {
				countRef(byNode, n, b, h)
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
		return byNode, nil
	}
	after := ""
	for {
		page, err := m.ListNodes(ctx, after, hashListPage)
		if err != nil {
			return nil, err
		}
		for _, e := range page {
			b, h := synchash.Of(e.ResourceID)
			for _, n := range e.Nodes {
				countRef(byNode, n, b, h)
			}
		}
		if len(page) < hashListPage {
			return byNode, nil
		}
		after = page[len(page)-1].ResourceID
	}
}

// countRef adds to node's table a reference whose bucket and hash are b
// and h: t.Add of its resource ID, the hash computed once per set. A
// node given as bytes is copied only when it has no table yet.
func countRef[N string | []byte](byNode map[string]*synchash.Table, node N, b int, h uint64) {
	t := byNode[string(node)]
	if t == nil {
		t = new(synchash.Table)
		byNode[string(node)] = t
	}
	t[b].Count++
	t[b].Hash += h
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
// those b drops: through RefState, whether a node is in a set is one lookup
// (bbolt: O(log N)), so a first sync of R references costs O(R log N),
// not O(R·N) as when each set was read (measured: 175.6 s for the first
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
	if err := checkAll(b.writes); err != nil {
		return nil, nil, fmt.Errorf("refcount: commit: %w", err)
	}
	v := newBatchView(ctx, m.storage)
	// A node with more single writes than a group holds has its stored
	// references read whole, once, rather than one request per write.
	singles := map[string]int{}
	for i := range b.writes {
		if op := &b.writes[i]; op.Kind == WriteAddRef || op.Kind == WriteRemoveRef {
			singles[op.Node]++
		}
	}
	for node, n := range singles {
		if n > GroupRefs {
			if err := v.readNode(node); err != nil {
				return nil, nil, err
			}
		}
	}
	touched := map[string]bool{}
	covered := map[string]*BucketSet{} // the buckets b replaces, by node
	var out []hashChange
	for i := range b.writes {
		op := &b.writes[i]
		switch op.Kind {
		case WriteAddRef, WriteRemoveRef:
			has, err := v.has(op.Key, op.Node)
			if err != nil {
				return nil, nil, err
			}
			touched[op.Node] = true
			if add := op.Kind == WriteAddRef; has != add {
				out = append(out, refChange(op.Key, op.Node, add))
				v.set(op.Key, op.Node, add)
			}
		case WriteDropRefs:
			nodes, err := v.nodes(op.Key)
			if err != nil {
				return nil, nil, err
			}
			for _, n := range nodes {
				out = append(out, refChange(op.Key, n, false))
				touched[n] = true
			}
			v.drop(op.Key)
		case WriteReplaceNode:
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
