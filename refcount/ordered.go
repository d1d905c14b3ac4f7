package refcount

import "context"

// CountingSubmitter is a Storage that adds a reference without reading
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

// AddRefOrdered adds nodeID to the resource's references, as AddRef does,
// in two halves: the write is ordered (Storage.Submit) when AddRefOrdered
// returns, and wait returns, once it is durable, the number of nodes that
// reference the resource after it (other writes may have landed since).
// A node already there writes nothing, except on a CountingSubmitter,
// which writes it again rather than read first. It takes no stripe: the write is
// one idempotent operation in its transaction, so it cannot undo a
// concurrent change; so a caller may hold its own mutex during
// AddRefOrdered and release it before wait.
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
	has, n, err := m.storage.RefState(ctx, resourceID, nodeID)
	if err != nil || has {
		return func() (int, error) { return n, err }
	}
	// The write is ordered outside the stripes, so the hash of the node
	// cannot be kept exactly: it is not offered until a whole sync of the
	// node sets it anew (a sync by hash of it sends the whole journal).
	m.markDirty(nodeID)
	written := m.storage.Submit(ctx, new(Batch).AddRef(resourceID, nodeID))
	return func() (int, error) {
		if err := written(); err != nil {
			return 0, err
		}
		_, n, err := m.storage.RefState(ctx, resourceID, nodeID)
		return n, err
	}
}
