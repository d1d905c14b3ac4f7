package lockserver

import (
	"context"
	"slices"
	"strings"
	"sync"

	"github.com/sharedcontent/sharedcontent/refcount"
)

// StateStore persists what the coordinator must keep across restarts
// besides the reference sets: the fence high-water mark, its identity and
// its members (SPEC §8). refcount's bolt storage implements it, in the
// same database as the reference sets.
type StateStore interface {
	FenceStore
	refcount.MemberStore
	GetString(ctx context.Context, key string) (string, error)
	PutString(ctx context.Context, key, v string) error
}

// memoryState is a StateStore that lives in memory (tests, and Lockers
// built without one): every Locker on it is a new cluster.
type memoryState struct {
	mu      sync.Mutex
	uints   map[string]uint64          // protected by mu
	strings map[string]string          // protected by mu
	members map[string]refcount.Member // protected by mu
}

func newMemoryState() *memoryState {
	return &memoryState{uints: map[string]uint64{}, strings: map[string]string{}, members: map[string]refcount.Member{}}
}

func (m *memoryState) GetUint64(_ context.Context, key string) (uint64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.uints[key], nil
}

func (m *memoryState) PutUint64(_ context.Context, key string, v uint64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.uints[key] = v
	return nil
}

func (m *memoryState) GetString(_ context.Context, key string) (string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.strings[key], nil
}

func (m *memoryState) PutString(_ context.Context, key, v string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.strings[key] = v
	return nil
}

func (m *memoryState) ListMembers(context.Context) ([]refcount.Member, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]refcount.Member, 0, len(m.members))
	for _, mb := range m.members {
		out = append(out, mb)
	}
	slices.SortFunc(out, func(a, b refcount.Member) int { return strings.Compare(a.ID, b.ID) })
	return out, nil
}

func (m *memoryState) PutMember(_ context.Context, mb refcount.Member) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.members[mb.ID] = mb
	return nil
}

func (m *memoryState) DeleteMember(_ context.Context, id string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.members, id)
	return nil
}
