package refcount

import (
	"context"
	"fmt"
	"hash/fnv"
	"strings"
	"sync"

	"github.com/containerd/errdefs"

	"github.com/sharedcontent/sharedcontent/lockserver/api"
)

// lockStripes is the number of mutexes that serialize per-resource updates.
const lockStripes = 32

// Config sets the Manager's policy.
type Config struct {
	// UpdateRequiresNoRef refuses an update while nodes other than the
	// requester reference the resource, as a delete always is.
	UpdateRequiresNoRef bool
}

// Manager applies the reference-count rules of the seeds' callback API on top
// of a Storage. It is safe for concurrent use: the read-modify-write of one
// resource's entry is serialized, so concurrent AddRef and RemoveRef calls
// never lose an update. That guarantee covers only mutations made through
// this Manager, so a Storage must have at most one Manager and be changed
// through it alone. The Manager does not own the Storage: closing it is the
// caller's job.
//
// Invalid arguments (an unknown api.OperationType, an empty resource or node ID)
// are errors wrapping errdefs.ErrInvalidArgument. Storage errors are
// returned as they are.
type Manager struct {
	storage Storage
	cfg     Config
	// stripes serialize mutations: the stripe of a resource (FNV-1a of its
	// ID modulo lockStripes) is held from the read of its entry to the write.
	// Reads that do not write take no stripe.
	stripes [lockStripes]sync.Mutex
}

// NewManager returns a Manager over storage with the given policy.
func NewManager(storage Storage, cfg Config) *Manager {
	return &Manager{storage: storage, cfg: cfg}
}

// ShouldSkipOperation reports whether nodeID can skip op on the resource
// because its effect is already there: a pull is skipped when nodeID already
// references the resource; an update or delete is never skipped. reason is
// set only when skip is true.
func (m *Manager) ShouldSkipOperation(ctx context.Context, op api.OperationType, resourceID, nodeID string) (skip bool, reason string, err error) {
	if err := validate(op, resourceID, nodeID); err != nil {
		return false, "", err
	}
	if op != api.OperationPull {
		return false, "", nil
	}
	rc, err := m.GetRefCount(ctx, resourceID)
	if err != nil {
		return false, "", err
	}
	if rc.Has(nodeID) {
		return true, fmt.Sprintf("node %s already references %s", nodeID, resourceID), nil
	}
	return false, "", nil
}

// CanPerformOperation reports whether nodeID may perform op on the resource.
// A pull is always allowed. A delete is refused while nodes other than nodeID
// reference the resource, and so is an update when Config.UpdateRequiresNoRef
// is set. reason, set only when ok is false, names the other nodes.
func (m *Manager) CanPerformOperation(ctx context.Context, op api.OperationType, resourceID, nodeID string) (ok bool, reason string, err error) {
	if err := validate(op, resourceID, nodeID); err != nil {
		return false, "", err
	}
	if op == api.OperationPull || (op == api.OperationUpdate && !m.cfg.UpdateRequiresNoRef) {
		return true, "", nil
	}
	rc, err := m.GetRefCount(ctx, resourceID)
	if err != nil {
		return false, "", err
	}
	if others := rc.Others(nodeID); len(others) > 0 {
		return false, fmt.Sprintf("%s is referenced by other nodes: %s", resourceID, strings.Join(others, ", ")), nil
	}
	return true, "", nil
}

// UpdateRefCount records the outcome of op by nodeID and returns the
// resource's reference count afterwards. A failed operation and an update
// change nothing; a successful pull adds nodeID (writing nothing if it was
// there already); a successful delete drops the resource's entry, so the
// result is the empty set.
func (m *Manager) UpdateRefCount(ctx context.Context, op api.OperationType, resourceID, nodeID string, success bool) (ReferenceCount, error) {
	if err := validate(op, resourceID, nodeID); err != nil {
		return ReferenceCount{}, err
	}
	switch {
	case success && op == api.OperationPull:
		return m.AddRef(ctx, resourceID, nodeID)
	case success && op == api.OperationDelete:
		unlock := m.lock(resourceID)
		defer unlock()
		return ReferenceCount{}, m.storage.Delete(ctx, resourceID)
	}
	return m.GetRefCount(ctx, resourceID)
}

// GetRefCount returns the resource's reference count: the empty set, and a
// nil error, when it has no entry.
func (m *Manager) GetRefCount(ctx context.Context, resourceID string) (ReferenceCount, error) {
	if resourceID == "" {
		return ReferenceCount{}, errEmpty("resource ID")
	}
	rc, err := m.storage.Get(ctx, resourceID)
	if errdefs.IsNotFound(err) {
		return ReferenceCount{}, nil
	}
	return rc, err
}

// AddRef adds nodeID to the resource's references and returns the result.
// Adding a node that is already there writes nothing.
func (m *Manager) AddRef(ctx context.Context, resourceID, nodeID string) (ReferenceCount, error) {
	return m.modify(ctx, resourceID, nodeID, (*ReferenceCount).Add)
}

// RemoveRef removes nodeID from the resource's references and returns the
// result. The entry is dropped when no reference is left; removing a node
// that is not there writes nothing.
func (m *Manager) RemoveRef(ctx context.Context, resourceID, nodeID string) (ReferenceCount, error) {
	return m.modify(ctx, resourceID, nodeID, (*ReferenceCount).Remove)
}

// modify applies change to the resource's entry under its stripe and stores
// the result if change reports a change: an empty set is deleted.
func (m *Manager) modify(ctx context.Context, resourceID, nodeID string, change func(*ReferenceCount, string) bool) (ReferenceCount, error) {
	if err := validateIDs(resourceID, nodeID); err != nil {
		return ReferenceCount{}, err
	}
	unlock := m.lock(resourceID)
	defer unlock()
	rc, err := m.GetRefCount(ctx, resourceID)
	if err != nil {
		return ReferenceCount{}, err
	}
	if !change(&rc, nodeID) {
		return rc, nil
	}
	if rc.Count == 0 {
		err = m.storage.Delete(ctx, resourceID)
	} else {
		err = m.storage.Set(ctx, resourceID, rc)
	}
	if err != nil {
		return ReferenceCount{}, err
	}
	return rc, nil
}

// ReplaceNode makes nodeID a reference of exactly refs (SPEC §8: a node's
// full sync, or forgetting a node with nil refs), atomically with respect
// to every other mutation made through this Manager.
func (m *Manager) ReplaceNode(ctx context.Context, nodeID string, refs map[string]struct{}) error {
	if nodeID == "" {
		return errEmpty("node ID")
	}
	for i := range m.stripes {
		m.stripes[i].Lock()
	}
	defer func() {
		for i := range m.stripes {
			m.stripes[i].Unlock()
		}
	}()
	return m.storage.ReplaceNode(ctx, nodeID, refs)
}

// MergeNode makes nodeID a reference of every resource of refs, keeping
// the ones it has (a sync from a journal generation the coordinator does
// not know: SPEC §8), atomically with respect to every other mutation
// made through this Manager.
func (m *Manager) MergeNode(ctx context.Context, nodeID string, refs map[string]struct{}) error {
	if nodeID == "" {
		return errEmpty("node ID")
	}
	for i := range m.stripes {
		m.stripes[i].Lock()
	}
	defer func() {
		for i := range m.stripes {
			m.stripes[i].Unlock()
		}
	}()
	all := make(map[string]struct{}, len(refs))
	for id := range refs {
		all[id] = struct{}{}
	}
	err := m.storage.List(ctx, func(resourceID string, rc ReferenceCount) error {
		if rc.Has(nodeID) {
			all[resourceID] = struct{}{}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("merge references of node %s: %w", nodeID, err)
	}
	return m.storage.ReplaceNode(ctx, nodeID, all)
}

// List calls fn for every resource with references, in resource ID order
// (a snapshot; see Storage.List).
func (m *Manager) List(ctx context.Context, fn func(resourceID string, rc ReferenceCount) error) error {
	return m.storage.List(ctx, fn)
}

// lock locks the resource's stripe and returns its unlock.
func (m *Manager) lock(resourceID string) (unlock func()) {
	h := fnv.New32a()
	h.Write([]byte(resourceID))
	mu := &m.stripes[h.Sum32()%lockStripes]
	mu.Lock()
	return mu.Unlock
}

func validate(op api.OperationType, resourceID, nodeID string) error {
	if !op.Valid() {
		return fmt.Errorf("operation type %q: %w", op, errdefs.ErrInvalidArgument)
	}
	return validateIDs(resourceID, nodeID)
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

func errEmpty(what string) error {
	return fmt.Errorf("empty %s: %w", what, errdefs.ErrInvalidArgument)
}
