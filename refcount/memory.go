package refcount

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"

	"github.com/containerd/errdefs"
)

// memoryStorage is a Storage kept in maps, lost when the process exits:
// reference sets, members, meta values and deletes in one object, so a
// Batch is atomic across all of them.
type memoryStorage struct {
	// mu guards every map: reads hold it shared, Commit exclusively. It is
	// never held while calling List's fn.
	mu sync.RWMutex
	// entries holds private deep copies; nothing outside the storage aliases
	// their Nodes maps.
	entries   map[string]ReferenceCount
	members   map[string]Member
	strs      map[string]string
	uints     map[string]uint64
	deleting  map[string]DeleteMarker
	completed map[string]DeleteCompletion
}

// NewMemoryStorage returns an empty Storage that lives in memory. It is safe
// for concurrent use, honours ctx like every Storage, and its Close is a
// no-op.
func NewMemoryStorage() Storage {
	return &memoryStorage{
		entries:   map[string]ReferenceCount{},
		members:   map[string]Member{},
		strs:      map[string]string{},
		uints:     map[string]uint64{},
		deleting:  map[string]DeleteMarker{},
		completed: map[string]DeleteCompletion{},
	}
}

func (s *memoryStorage) Get(ctx context.Context, resourceID string) (ReferenceCount, error) {
	if err := ctx.Err(); err != nil {
		return ReferenceCount{}, err
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	rc, ok := s.entries[resourceID]
	if !ok {
		return ReferenceCount{}, fmt.Errorf("refcount %s: %w", resourceID, errdefs.ErrNotFound)
	}
	return rc.Clone(), nil
}

func (s *memoryStorage) Set(ctx context.Context, resourceID string, rc ReferenceCount) error {
	if resourceID == "" {
		return fmt.Errorf("refcount: empty resource ID: %w", errdefs.ErrInvalidArgument)
	}
	return s.Commit(ctx, new(Batch).SetRefs(resourceID, rc))
}

func (s *memoryStorage) Delete(ctx context.Context, resourceID string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if resourceID == "" {
		return nil
	}
	return s.Commit(ctx, new(Batch).DropRefs(resourceID))
}

func (s *memoryStorage) List(ctx context.Context, fn func(resourceID string, rc ReferenceCount) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.RLock()
	entries := make([]entry, 0, len(s.entries))
	for id, rc := range s.entries {
		entries = append(entries, entry{id: id, rc: rc.Clone()})
	}
	s.mu.RUnlock()
	slices.SortFunc(entries, func(a, b entry) int { return strings.Compare(a.id, b.id) })
	return visit(ctx, entries, fn)
}

func (s *memoryStorage) ReplaceNode(ctx context.Context, node string, refs map[string]struct{}) error {
	return s.Commit(ctx, new(Batch).ReplaceNode(node, refs))
}

// Commit implements Storage: every write is checked before any is made,
// and all are made under one exclusive lock.
func (s *memoryStorage) Commit(ctx context.Context, b *Batch) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	for i := range b.ops {
		if err := b.ops[i].check(); err != nil {
			return fmt.Errorf("refcount: commit: %w", err)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range b.ops {
		s.apply(&b.ops[i])
	}
	return nil
}

// apply makes one checked write. Callers hold mu exclusively.
func (s *memoryStorage) apply(op *Op) {
	switch op.Kind {
	case OpSetRefs:
		c := op.Refs.Clone()
		c.Count = len(c.Nodes)
		s.entries[op.Key] = c
	case OpDropRefs:
		delete(s.entries, op.Key)
	case OpAddRef:
		if rc := s.entries[op.Key]; !rc.Has(op.Node) {
			rc = rc.Clone()
			rc.Add(op.Node)
			s.entries[op.Key] = rc
		}
	case OpRemoveRef:
		if rc := s.entries[op.Key]; rc.Has(op.Node) {
			s.dropNode(op.Key, rc, op.Node)
		}
	case OpReplaceNode:
		s.replaceNode(op.Node, op.NodeRefs)
	case OpPutMember:
		s.members[op.Key] = op.Member
	case OpDeleteMember:
		delete(s.members, op.Key)
	case OpPutString:
		s.strs[op.Key] = op.String
	case OpPutUint64:
		s.uints[op.Key] = op.Uint64
	case OpPutDeleting:
		s.deleting[op.Key] = op.Deleting
	case OpDropDeleting:
		delete(s.deleting, op.Key)
	case OpPutDeleted:
		s.completed[op.Key] = op.Deleted
	case OpDropDeleted:
		delete(s.completed, op.Key)
	}
}

func (s *memoryStorage) replaceNode(node string, refs map[string]struct{}) {
	for id, rc := range s.entries {
		if _, keep := refs[id]; !keep && rc.Has(node) {
			s.dropNode(id, rc, node)
		}
	}
	for id := range refs {
		s.apply(&Op{Kind: OpAddRef, Key: id, Node: node})
	}
}

// dropNode stores rc without node under id, dropping the entry if that
// leaves it empty. Callers hold mu exclusively.
func (s *memoryStorage) dropNode(id string, rc ReferenceCount, node string) {
	rc = rc.Clone()
	rc.Remove(node)
	if rc.Count == 0 {
		delete(s.entries, id)
	} else {
		s.entries[id] = rc
	}
}

func (s *memoryStorage) ListMembers(ctx context.Context) ([]Member, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := slices.Collect(maps.Values(s.members))
	slices.SortFunc(out, func(a, b Member) int { return strings.Compare(a.ID, b.ID) })
	return out, nil
}

func (s *memoryStorage) PutMember(ctx context.Context, m Member) error {
	return s.Commit(ctx, new(Batch).PutMember(m))
}

func (s *memoryStorage) DeleteMember(ctx context.Context, id string) error {
	if id == "" {
		return nil
	}
	return s.Commit(ctx, new(Batch).DeleteMember(id))
}

func (s *memoryStorage) GetUint64(ctx context.Context, key string) (uint64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.uints[key], nil
}

func (s *memoryStorage) PutUint64(ctx context.Context, key string, v uint64) error {
	return s.Commit(ctx, new(Batch).PutUint64(key, v))
}

func (s *memoryStorage) GetString(ctx context.Context, key string) (string, error) {
	if err := ctx.Err(); err != nil {
		return "", err
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.strs[key], nil
}

func (s *memoryStorage) PutString(ctx context.Context, key, v string) error {
	return s.Commit(ctx, new(Batch).PutString(key, v))
}

func (s *memoryStorage) Deletes(ctx context.Context) (Deletes, error) {
	if err := ctx.Err(); err != nil {
		return Deletes{}, err
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	return Deletes{InFlight: maps.Clone(s.deleting), Completed: maps.Clone(s.completed)}, nil
}

func (s *memoryStorage) Close() error { return nil }
