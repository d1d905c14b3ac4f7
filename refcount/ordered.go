package refcount

import "context"

// RefStater is a Storage that tells whether a node references a resource
// and how many nodes do without reading the reference set: O(1) in
// memory, O(log N) on bbolt. The Manager uses it to add a reference at a
// cost that does not grow with the set (docs/design.md §10.2).
type RefStater interface {
	// RefState returns whether node is in the resource's reference set
	// and the set's size (false and 0 when it has none).
	RefState(ctx context.Context, resourceID, node string) (has bool, count int, err error)
}

// Submitter is a Storage whose Commit comes in two halves, so that a
// caller can order its writes under its own mutex without holding that
// mutex through the disk's flush. Submit orders b after every batch
// submitted or committed through the store before it returns, and before
// every one after; wait returns what Commit would have returned, once the
// batch is durable. Until then reads may not see b. Commit(ctx, b) is
// Submit(ctx, b)().
type Submitter interface {
	Submit(ctx context.Context, b *Batch) (wait func() error)
}

// CountingSubmitter is a Submitter that adds a reference without reading
// first, and learns in the transaction that commits the add whether the
// node was in the set and how many nodes are: on etcd an add then costs no
// round trip of its own (docs/design.md §7.1, "Adds that count in their
// transaction"), on bbolt no read transaction (§10.6).
type CountingSubmitter interface {
	// SubmitAddRef orders the addition of node to the resource's set, as
	// Submit of a Batch.AddRef does (the add is written even when the
	// node is there already). wait returns once it is committed, with
	// added false only when the node was surely in the set before it, and
	// the set's size right after the transaction that holds it.
	SubmitAddRef(ctx context.Context, resourceID, node string) (wait func() (added bool, count int, err error))
}

// NodeRefLister is a Storage that keeps, beside the reference sets, an
// index of the resources each node references, and reads it: the memory,
// bbolt and etcd stores, whose ReplaceNode reads that index and so costs
// O(the node's references) (docs/design.md §7.1, §10.2). NodeRefs returns the
// resources in whose sets the node is, in resource ID order (none: an
// empty list); it always equals what the sets say.
type NodeRefLister interface {
	NodeRefs(ctx context.Context, node string) ([]string, error)
}

var (
	_ NodeRefLister = (*BoltStorage)(nil)
	_ NodeRefLister = (*memoryStorage)(nil)
	_ RefStater     = (*BoltStorage)(nil)
	_ Submitter     = (*BoltStorage)(nil)
	_ RefStater     = (*memoryStorage)(nil)
	_ Submitter     = (*memoryStorage)(nil)
)

// AddRefOrdered adds nodeID to the resource's references, as AddRef does,
// in two halves: the write is ordered (Submitter) when AddRefOrdered
// returns, and wait returns, once it is durable, the number of nodes that
// reference the resource after it (other writes may have landed since).
// A node already there writes nothing, except on a CountingSubmitter,
// which writes it again rather than read first. It takes no stripe: the write is
// one idempotent operation in its transaction, so it cannot undo a
// concurrent change; so a caller may hold its own mutex during
// AddRefOrdered and release it before wait.
//
// On a storage that is neither a RefStater nor a Submitter (a wrapper)
// it is AddRef, done before it returns.
func (m *Manager) AddRefOrdered(ctx context.Context, resourceID, nodeID string) (wait func() (int, error)) {
	failed := func(err error) func() (int, error) { return func() (int, error) { return 0, err } }
	if err := validateIDs(resourceID, nodeID); err != nil {
		return failed(err)
	}
	if cs, ok := m.storage.(CountingSubmitter); ok {
		// The write is ordered outside the stripes, so the hash of the
		// node cannot be kept exactly: it is not offered until a whole
		// sync of the node sets it anew (a failed add may land later).
		wait := cs.SubmitAddRef(ctx, resourceID, nodeID)
		return func() (int, error) {
			added, n, err := wait()
			if added || err != nil {
				m.markDirty(nodeID)
			}
			return n, err
		}
	}
	st, okState := m.storage.(RefStater)
	sub, okSub := m.storage.(Submitter)
	if !okState || !okSub {
		rc, err := m.AddRef(ctx, resourceID, nodeID)
		return func() (int, error) { return rc.Len(), err }
	}
	has, n, err := st.RefState(ctx, resourceID, nodeID)
	if err != nil || has {
		return func() (int, error) { return n, err }
	}
	// The write is ordered outside the stripes, so the hash of the node
	// cannot be kept exactly: it is not offered until a whole sync of the
	// node sets it anew (a sync by hash of it sends the whole journal).
	m.markDirty(nodeID)
	written := sub.Submit(ctx, new(Batch).AddRef(resourceID, nodeID))
	return func() (int, error) {
		if err := written(); err != nil {
			return 0, err
		}
		_, n, err := st.RefState(ctx, resourceID, nodeID)
		return n, err
	}
}
