package refcount

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/containerd/errdefs"
)

// memoryState is the state of a memory Storage, shared by its handles:
// reference sets, members, meta values and deletes in one object, so a
// Batch is atomic across all of them.
type memoryState struct {
	// mu guards every field: reads hold it shared, Commit and TakeOver
	// exclusively.
	mu sync.RWMutex
	// owner is the fence of the newest handle.
	owner uint64
	// entries holds private deep copies; nothing outside the storage aliases
	// their Nodes maps.
	entries map[string]Set
	// byNode is the per-node index, as bbolt's (bolt_nodes.go): for each
	// node, the resources whose sets hold it; kept with entries by every
	// write, so replacing a node's references reads its own.
	byNode  map[string]map[string]struct{}
	members map[string]Member
	// strs and uints hold the meta values, the identity and the fence
	// high-water mark under their bbolt keys.
	strs      map[string]string
	uints     map[string]uint64
	deleting  map[string]DeleteMarker
	completed map[string]DeleteCompletion
	leases    map[string]LeaseRecord // by leaseKey
	pins      map[string]PinRecord   // by name
	root      *RootClaim             // the identity's Root
}

// memoryStorage is a handle on a memoryState, lost when the process exits.
type memoryStorage struct {
	st     *memoryState
	fence  uint64
	closed atomic.Bool
}

// NewMemoryStorage returns a handle on a new, empty Storage that lives in
// memory. It is safe for concurrent use and honours ctx like every
// Storage; TakeOver opens another handle on the same state.
func NewMemoryStorage() LocalStorage {
	st := &memoryState{
		owner:     1,
		entries:   map[string]Set{},
		byNode:    map[string]map[string]struct{}{},
		members:   map[string]Member{},
		strs:      map[string]string{},
		uints:     map[string]uint64{},
		deleting:  map[string]DeleteMarker{},
		completed: map[string]DeleteCompletion{},
		leases:    map[string]LeaseRecord{},
		pins:      map[string]PinRecord{},
	}
	return &memoryStorage{st: st, fence: 1}
}

func (s *memoryStorage) TakeOver(ctx context.Context) (LocalStorage, error) {
	if err := s.usable(ctx); err != nil {
		return nil, err
	}
	s.st.mu.Lock()
	defer s.st.mu.Unlock()
	s.st.owner++
	return &memoryStorage{st: s.st, fence: s.st.owner}, nil
}

func (s *memoryStorage) OwnerFence() uint64 { return s.fence }

// read returns ctx.Err() or errClosed, or else holds the state's lock
// shared and returns its unlock.
func (s *memoryStorage) read(ctx context.Context) (unlock func(), err error) {
	if err := s.usable(ctx); err != nil {
		return nil, err
	}
	s.st.mu.RLock()
	return s.st.mu.RUnlock, nil
}

func (s *memoryStorage) usable(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if s.closed.Load() {
		return errClosed
	}
	return nil
}

func (s *memoryStorage) Get(ctx context.Context, resourceID string) (Set, error) {
	unlock, err := s.read(ctx)
	if err != nil {
		return Set{}, err
	}
	defer unlock()
	rc, ok := s.st.entries[resourceID]
	if !ok {
		return Set{}, fmt.Errorf("refcount %s: %w", resourceID, errdefs.ErrNotFound)
	}
	return rc.Clone(), nil
}

func (s *memoryStorage) List(ctx context.Context, after string, limit int) ([]Entry, error) {
	if err := checkList(limit); err != nil {
		return nil, err
	}
	unlock, err := s.read(ctx)
	if err != nil {
		return nil, err
	}
	defer unlock()
	ids := slices.Sorted(maps.Keys(s.st.entries))
	i, found := slices.BinarySearch(ids, after)
	if found {
		i++
	}
	ids = ids[i:min(len(ids), i+limit)]
	page := make([]Entry, len(ids))
	for j, id := range ids {
		page[j] = Entry{ResourceID: id, Refs: s.st.entries[id].Clone()}
	}
	return page, nil
}

// Commit implements Storage: every write is checked before any is made,
// and all are made under one exclusive lock, after the guard.
func (s *memoryStorage) Commit(ctx context.Context, b *Batch) error {
	if err := s.usable(ctx); err != nil {
		return err
	}
	if b.Len() == 0 {
		return nil
	}
	if err := checkAll(b.writes); err != nil {
		return fmt.Errorf("refcount: commit: %w", err)
	}
	s.st.mu.Lock()
	defer s.st.mu.Unlock()
	if s.st.owner != s.fence {
		return fenced(s.fence, s.st.owner)
	}
	for i := range b.writes {
		s.st.apply(&b.writes[i])
	}
	return nil
}

// Submit implements Storage: memory commits at once.
func (s *memoryStorage) Submit(ctx context.Context, b *Batch) (wait func() error) {
	err := s.Commit(ctx, b)
	return func() error { return err }
}

// RefState implements Storage.
func (s *memoryStorage) RefState(ctx context.Context, resourceID, node string) (has bool, count int, err error) {
	unlock, err := s.read(ctx)
	if err != nil {
		return false, 0, err
	}
	defer unlock()
	rc := s.st.entries[resourceID]
	return rc.Has(node), rc.Len(), nil
}

// apply makes one checked write. Callers hold mu exclusively.
func (st *memoryState) apply(op *Write) {
	switch op.Kind {
	case WriteDropRefs:
		for n := range st.entries[op.Key].Nodes {
			st.unindex(n, op.Key)
		}
		delete(st.entries, op.Key)
	case WriteAddRef:
		st.addRef(op.Key, op.Node)
	case WriteRemoveRef:
		if rc := st.entries[op.Key]; rc.Has(op.Node) {
			st.dropNode(op.Key, rc, op.Node)
		}
	case WriteReplaceNode:
		st.replaceNode(op.Node, op.Buckets, op.NodeRefs)
	case WritePutMember:
		st.members[op.Key] = op.Member
	case WriteDeleteMember:
		delete(st.members, op.Key)
	case WritePutIdentity:
		st.strs[clusterIDKey], st.uints[epochKey] = op.Identity.ClusterID, op.Identity.Epoch
		st.root = nil
		if r := op.Identity.Root; r != nil {
			st.root = &RootClaim{CreatedAt: r.CreatedAt, CreatedBy: r.CreatedBy}
		}
	case WritePutLeaseFenceMark:
		st.uints[fenceMarkKey] = op.Uint64
	case WritePutString:
		st.strs[op.Key] = op.String
	case WritePutUint64:
		st.uints[op.Key] = op.Uint64
	case WritePutDeleting:
		st.deleting[op.Key] = op.Deleting
	case WriteDropDeleting:
		delete(st.deleting, op.Key)
	case WritePutDeleted:
		st.completed[op.Key] = op.Deleted
	case WriteDropDeleted:
		delete(st.completed, op.Key)
	case WritePutLease:
		st.leases[leaseKey(op.Key, op.Lease.LeaseID)] = op.Lease
	case WriteDropLease:
		delete(st.leases, leaseKey(op.Key, op.Lease.LeaseID))
	case WritePutPin:
		p := clonePin(op.Pin)
		p.Name = op.Key
		st.pins[op.Key] = p
	case WriteDropPin:
		delete(st.pins, op.Key)
	}
}

// replaceNode reads the node's index only: O(its old and new
// references).
func (st *memoryState) replaceNode(node string, buckets *BucketSet, refs map[string]struct{}) {
	for id := range st.byNode[node] {
		if _, keep := refs[id]; !keep && buckets.Holds(id) {
			st.dropNode(id, st.entries[id], node)
		}
	}
	for id := range refs {
		st.addRef(id, node)
	}
}

// addRef adds node to the set id and to the node's index. Callers hold
// mu exclusively.
func (st *memoryState) addRef(id, node string) {
	// In place: reads copy a set out, so nothing aliases it.
	rc := st.entries[id]
	if !rc.Add(node) {
		return
	}
	st.entries[id] = rc
	ids := st.byNode[node]
	if ids == nil {
		ids = map[string]struct{}{}
		st.byNode[node] = ids
	}
	ids[id] = struct{}{}
}

// dropNode stores rc without node under id, dropping the entry if that
// leaves it empty, and id from the node's index. Callers hold mu
// exclusively.
func (st *memoryState) dropNode(id string, rc Set, node string) {
	rc.Remove(node)
	if rc.Len() == 0 {
		delete(st.entries, id)
	} else {
		st.entries[id] = rc
	}
	st.unindex(node, id)
}

// unindex removes id from the node's index, and the node with its last.
func (st *memoryState) unindex(node, id string) {
	ids := st.byNode[node]
	delete(ids, id)
	if len(ids) == 0 {
		delete(st.byNode, node)
	}
}

// NodeRefs implements Storage.
func (s *memoryStorage) NodeRefs(ctx context.Context, node string) ([]string, error) {
	unlock, err := s.read(ctx)
	if err != nil {
		return nil, err
	}
	defer unlock()
	return slices.Sorted(maps.Keys(s.st.byNode[node])), nil
}

func (s *memoryStorage) ListMembers(ctx context.Context) ([]Member, error) {
	unlock, err := s.read(ctx)
	if err != nil {
		return nil, err
	}
	defer unlock()
	out := slices.Collect(maps.Values(s.st.members))
	slices.SortFunc(out, func(a, b Member) int { return strings.Compare(a.ID, b.ID) })
	return out, nil
}

func (s *memoryStorage) Identity(ctx context.Context) (Identity, error) {
	unlock, err := s.read(ctx)
	if err != nil {
		return Identity{}, err
	}
	defer unlock()
	id := Identity{ClusterID: s.st.strs[clusterIDKey], Epoch: s.st.uints[epochKey]}
	if r := s.st.root; r != nil {
		id.Root = &RootClaim{CreatedAt: r.CreatedAt, CreatedBy: r.CreatedBy}
	}
	return id, nil
}

func (s *memoryStorage) LeaseFenceMark(ctx context.Context) (uint64, error) {
	return s.GetUint64(ctx, fenceMarkKey)
}

func (s *memoryStorage) GetUint64(ctx context.Context, key string) (uint64, error) {
	unlock, err := s.read(ctx)
	if err != nil {
		return 0, err
	}
	defer unlock()
	return s.st.uints[key], nil
}

func (s *memoryStorage) GetString(ctx context.Context, key string) (string, error) {
	unlock, err := s.read(ctx)
	if err != nil {
		return "", err
	}
	defer unlock()
	return s.st.strs[key], nil
}

func (s *memoryStorage) Deletes(ctx context.Context) (Deletes, error) {
	unlock, err := s.read(ctx)
	if err != nil {
		return Deletes{}, err
	}
	defer unlock()
	return Deletes{InFlight: maps.Clone(s.st.deleting), Completed: maps.Clone(s.st.completed)}, nil
}

func (s *memoryStorage) Leases(ctx context.Context) ([]LeaseRecord, error) {
	unlock, err := s.read(ctx)
	if err != nil {
		return nil, err
	}
	defer unlock()
	out := make([]LeaseRecord, 0, len(s.st.leases))
	for _, k := range slices.Sorted(maps.Keys(s.st.leases)) {
		out = append(out, s.st.leases[k])
	}
	return out, nil
}

func (s *memoryStorage) Pins(ctx context.Context) ([]PinRecord, error) {
	unlock, err := s.read(ctx)
	if err != nil {
		return nil, err
	}
	defer unlock()
	out := make([]PinRecord, 0, len(s.st.pins))
	for _, k := range slices.Sorted(maps.Keys(s.st.pins)) {
		out = append(out, clonePin(s.st.pins[k]))
	}
	return out, nil
}

// Close implements Storage: later calls through this handle fail; the
// state lives on for the other handles.
func (s *memoryStorage) Close() error {
	s.closed.Store(true)
	return nil
}
