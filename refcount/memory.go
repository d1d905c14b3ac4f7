package refcount

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/containerd/errdefs"
)

// memoryStorage is a Storage kept in a map, lost when the process exits.
type memoryStorage struct {
	// mu guards entries: Get and List hold it shared, Set and Delete
	// exclusively. It is never held while calling List's fn.
	mu sync.RWMutex
	// entries holds private deep copies; nothing outside the storage aliases
	// their Nodes maps.
	entries map[string]ReferenceCount
}

// NewMemoryStorage returns an empty Storage that lives in memory. It is safe
// for concurrent use, honours ctx like every Storage, and its Close is a
// no-op.
func NewMemoryStorage() Storage {
	return &memoryStorage{entries: make(map[string]ReferenceCount)}
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
	if err := ctx.Err(); err != nil {
		return err
	}
	if resourceID == "" {
		return fmt.Errorf("refcount: empty resource ID: %w", errdefs.ErrInvalidArgument)
	}
	c := rc.Clone()
	c.Count = len(c.Nodes)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.entries[resourceID] = c
	return nil
}

func (s *memoryStorage) Delete(ctx context.Context, resourceID string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.entries, resourceID)
	return nil
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
	if err := ctx.Err(); err != nil {
		return err
	}
	if node == "" {
		return errEmpty("node ID")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, rc := range s.entries {
		if _, keep := refs[id]; !keep && rc.Remove(node) {
			if rc.Count == 0 {
				delete(s.entries, id)
			} else {
				s.entries[id] = rc
			}
		}
	}
	for id := range refs {
		rc := s.entries[id]
		if rc.Add(node) {
			s.entries[id] = rc
		}
	}
	return nil
}

func (s *memoryStorage) Close() error { return nil }
