package refcount_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/containerd/errdefs"
	"github.com/stretchr/testify/require"

	"github.com/sharedcontent/sharedcontent/refcount"
)

// storages are the Storage implementations the Manager is tested on.
var storages = []struct {
	name string
	new  func(*testing.T) refcount.Storage
}{
	{"memory", newMemoryStorage},
	{"bolt", newBoltStorage},
}

// forEachStorage runs fn on a Manager over each new Storage, seeded with
// refs: resource ID to referring nodes. The Storage counts its writes.
func forEachStorage(t *testing.T, refs map[string][]string, fn func(*testing.T, *refcount.Manager, *countingStorage)) {
	for _, st := range storages {
		t.Run(st.name, func(t *testing.T) {
			s := &countingStorage{Storage: st.new(t)}
			b := new(refcount.Batch)
			for id, nodes := range refs {
				for _, n := range nodes {
					b.AddRef(id, n)
				}
			}
			require.NoError(t, s.Storage.Commit(t.Context(), b))
			fn(t, refcount.NewManager(s), s)
		})
	}
}

// countingStorage counts the writes committed through it.
type countingStorage struct {
	refcount.Storage
	writes atomic.Int64
}

func (s *countingStorage) Commit(ctx context.Context, b *refcount.Batch) error {
	s.writes.Add(int64(b.Len()))
	return s.Storage.Commit(ctx, b)
}

// seed is the state the tests start from.
var seed = map[string][]string{
	"mine":   {"n1"},
	"shared": {"n1", "n2", "n3"},
	"theirs": {"n2"},
}

func TestAddTwiceWritesOnce(t *testing.T) {
	forEachStorage(t, nil, func(t *testing.T, m *refcount.Manager, s *countingStorage) {
		for range 2 {
			rc, err := m.AddRef(t.Context(), "r", "n1")
			require.NoError(t, err)
			require.Equal(t, []string{"n1"}, rc.NodeList())
		}
		requireNodes(t, s, "r", []string{"n1"})
		require.Equal(t, int64(1), s.writes.Load(), "only the first add writes")
	})
}

func TestAddRemoveRef(t *testing.T) {
	forEachStorage(t, seed, func(t *testing.T, m *refcount.Manager, s *countingStorage) {
		ctx := t.Context()
		rc, err := m.AddRef(ctx, "theirs", "n1")
		require.NoError(t, err)
		require.Equal(t, []string{"n1", "n2"}, rc.NodeList())

		rc, err = m.RemoveRef(ctx, "shared", "n2")
		require.NoError(t, err)
		require.Equal(t, []string{"n1", "n3"}, rc.NodeList())
		requireNodes(t, s, "shared", []string{"n1", "n3"})

		rc, err = m.RemoveRef(ctx, "mine", "n9")
		require.NoError(t, err, "removing a node that is not there")
		require.Equal(t, []string{"n1"}, rc.NodeList())

		rc, err = m.RemoveRef(ctx, "mine", "n1")
		require.NoError(t, err)
		require.Zero(t, rc.Len())
		requireNodes(t, s, "mine", nil)

		rc, err = m.RemoveRef(ctx, "absent", "n1")
		require.NoError(t, err)
		require.Zero(t, rc.Len())
		requireNodes(t, s, "absent", nil)
	})
}

func TestRefsAbsent(t *testing.T) {
	forEachStorage(t, nil, func(t *testing.T, m *refcount.Manager, _ *countingStorage) {
		rc, err := m.Refs(t.Context(), "absent")
		require.NoError(t, err)
		require.Zero(t, rc.Len())
		require.Empty(t, rc.Nodes)
	})
}

func TestManagerInvalidArgument(t *testing.T) {
	forEachStorage(t, nil, func(t *testing.T, m *refcount.Manager, _ *countingStorage) {
		ctx := t.Context()
		for _, c := range []struct{ resource, node string }{
			{"", "n"},
			{"r", ""},
		} {
			_, err := m.AddRef(ctx, c.resource, c.node)
			requireInvalid(t, err, c)
			_, err = m.RemoveRef(ctx, c.resource, c.node)
			requireInvalid(t, err, c)
		}
		requireInvalid(t, m.ReplaceNode(ctx, "", nil), "ReplaceNode")
		_, err := m.Refs(ctx, "")
		requireInvalid(t, err, "Refs")
	})
}

func TestManagerConcurrent(t *testing.T) {
	const (
		resources = 4
		nodes     = 16
		rounds    = 5
	)
	forEachStorage(t, nil, func(t *testing.T, m *refcount.Manager, s *countingStorage) {
		ctx := t.Context()
		// Each node adds itself to every resource, removes itself again, and
		// adds itself back, rounds times; odd nodes leave at the end.
		var wg sync.WaitGroup
		for n := range nodes {
			node := fmt.Sprintf("n%02d", n)
			for r := range resources {
				resource := fmt.Sprintf("r%d", r)
				wg.Go(func() {
					for range rounds {
						for _, f := range []func() (refcount.Set, error){
							func() (refcount.Set, error) { return m.AddRef(ctx, resource, node) },
							func() (refcount.Set, error) { return m.RemoveRef(ctx, resource, node) },
							func() (refcount.Set, error) { return m.AddRef(ctx, resource, node) },
						} {
							if _, err := f(); err != nil {
								t.Error(err)
								return
							}
						}
					}
					if n%2 == 1 {
						if _, err := m.RemoveRef(ctx, resource, node); err != nil {
							t.Error(err)
						}
					}
				})
			}
		}
		wg.Wait()
		var want []string
		for n := 0; n < nodes; n += 2 {
			want = append(want, fmt.Sprintf("n%02d", n))
		}
		for r := range resources {
			requireNodes(t, s, fmt.Sprintf("r%d", r), want)
		}
	})
}

// requireNodes asserts the resource's stored references; nil means no entry.
func requireNodes(t *testing.T, s refcount.Storage, resource string, want []string) {
	t.Helper()
	rc, err := s.Get(t.Context(), resource)
	if want == nil {
		require.True(t, errdefs.IsNotFound(err), "%s: want no entry, got %v, %v", resource, rc.NodeList(), err)
		return
	}
	require.NoError(t, err)
	require.Equal(t, want, rc.NodeList(), resource)
}

func requireInvalid(t *testing.T, err error, what any) {
	t.Helper()
	require.True(t, errdefs.IsInvalidArgument(err), "%v: got %v", what, err)
}
