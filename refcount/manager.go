package refcount

import (
	"context"
	"hash/fnv"
	"sync"

	"github.com/containerd/errdefs"
)

// lockStripes is the number of mutexes that serialize per-resource updates.
const lockStripes = 32

// Manager changes reference sets on top of a Storage. It is safe for
// concurrent use: the read-modify-write of one resource's set is
// serialized, so concurrent AddRef and RemoveRef calls each return the set
// as their own write left it. That guarantee covers only writes made
// through this Manager, so a Storage must have at most one Manager and its
// reference sets be changed through it alone. The Manager does not own
// the Storage: closing it is the caller's job.
//
// An empty resource or node ID is an error wrapping
// errdefs.ErrInvalidArgument. Storage errors are returned as they are.
type Manager struct {
	storage Storage
	// stripes serialize writes: the stripe of a resource (FNV-1a of its
	// ID modulo lockStripes) is held from the read of its set to the write.
	// Reads that do not write take no stripe.
	stripes [lockStripes]sync.Mutex
	// hashes are the nodes' reference hashes (hashes.go).
	hashes nodeHashes
}

// NewManager returns a Manager over storage.
func NewManager(storage Storage) *Manager {
	return &Manager{storage: storage}
}

// Refs returns the resource's reference set: the empty set, and a
// nil error, when it has no entry.
func (m *Manager) Refs(ctx context.Context, resourceID string) (Set, error) {
	if resourceID == "" {
		return Set{}, errEmpty("resource ID")
	}
	rc, err := m.storage.Get(ctx, resourceID)
	if errdefs.IsNotFound(err) {
		return Set{}, nil
	}
	return rc, err
}

// AddRef adds nodeID to the resource's references and returns the result.
// Adding a node that is already there writes nothing.
func (m *Manager) AddRef(ctx context.Context, resourceID, nodeID string) (Set, error) {
	return m.modify(ctx, new(Batch).AddRef(resourceID, nodeID), (*Set).Add)
}

// RemoveRef removes nodeID from the resource's references and returns the
// result. The entry is dropped when no reference is left; removing a node
// that is not there writes nothing.
func (m *Manager) RemoveRef(ctx context.Context, resourceID, nodeID string) (Set, error) {
	return m.modify(ctx, new(Batch).RemoveRef(resourceID, nodeID), (*Set).Remove)
}

// modify commits b, a one-write batch that adds or removes a node, under
// the resource's stripe, if change reports that the write changes the
// set; it returns the set after the write.
func (m *Manager) modify(ctx context.Context, b *Batch, change func(*Set, string) bool) (Set, error) {
	op := b.writes[0]
	if err := validateIDs(op.Key, op.Node); err != nil {
		return Set{}, err
	}
	unlock := m.lock(op.Key)
	defer unlock()
	rc, err := m.Refs(ctx, op.Key)
	if err != nil {
		return Set{}, err
	}
	if !change(&rc, op.Node) {
		return rc, nil
	}
	if err := m.storage.Commit(ctx, b); err != nil {
		m.markAllDirty([]string{op.Node}) // it may land later (etcd)
		return Set{}, err
	}
	m.applyHashes([]hashChange{refChange(op.Key, op.Node, op.Kind == WriteAddRef)})
	return rc, nil
}

// ReplaceNode makes nodeID a reference of exactly refs (a node's full
// sync, or forgetting a node with nil refs), atomically with respect
// to every other mutation made through this Manager.
func (m *Manager) ReplaceNode(ctx context.Context, nodeID string, refs map[string]struct{}) error {
	if nodeID == "" {
		return errEmpty("node ID")
	}
	return m.Commit(ctx, new(Batch).ReplaceNode(nodeID, refs))
}

// Commit commits b to the storage in one transaction (Storage.Commit),
// atomically with respect to every other mutation made through this
// Manager: it holds the stripes of the resources whose references b
// changes (all of them if b replaces a node's references).
func (m *Manager) Commit(ctx context.Context, b *Batch) error {
	unlock := m.lockBatch(b)
	defer unlock()
	changes, nodes, err := m.batchHashes(ctx, b)
	if err != nil {
		return err
	}
	if err := m.storage.Commit(ctx, b); err != nil {
		m.markAllDirty(nodes)
		return err
	}
	m.applyHashes(changes)
	return nil
}

// Storage returns the storage the Manager writes to. Writes to reference
// sets must go through the Manager; reads of the rest may go direct.
func (m *Manager) Storage() Storage { return m.storage }

// List returns a page of the reference sets (Storage.List).
func (m *Manager) List(ctx context.Context, after string, limit int) ([]Entry, error) {
	return m.storage.List(ctx, after, limit)
}

// lock locks the resource's stripe and returns its unlock.
func (m *Manager) lock(resourceID string) (unlock func()) {
	mu := &m.stripes[stripeOf(resourceID)]
	mu.Lock()
	return mu.Unlock
}

func stripeOf(resourceID string) uint32 {
	h := fnv.New32a()
	h.Write([]byte(resourceID))
	return h.Sum32() % lockStripes
}

// lockBatch locks, in index order, the stripes of the resources whose
// references b changes, and returns their unlock.
func (m *Manager) lockBatch(b *Batch) (unlock func()) {
	var held [lockStripes]bool
	for i := range b.writes {
		some, all := b.writes[i].touchesRefs()
		switch {
		case all:
			for s := range held {
				held[s] = true
			}
		case some:
			held[stripeOf(b.writes[i].Key)] = true
		}
	}
	for s := range held {
		if held[s] {
			m.stripes[s].Lock()
		}
	}
	return func() {
		for s := range held {
			if held[s] {
				m.stripes[s].Unlock()
			}
		}
	}
}

func validateIDs(resourceID, nodeID string) error {
	if resourceID == "" {
		return errEmpty("resource ID")
	}
	if nodeID == "" {
		return errEmpty("node ID")
	}
	return nil
}
