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

	"github.com/sharedcontent/sharedcontent/lockserver/api"
)

// storages are the Storage implementations the Manager is tested on.
var storages = []struct {
	name string
	new  func(*testing.T) refcount.Storage
}{
	{"memory", newMemoryStorage},
	{"bolt", newBoltStorage},
}

// forEachStorage runs fn on a Manager with cfg over each new Storage, seeded
// with refs: resource ID to referring nodes. The Storage counts its writes.
func forEachStorage(t *testing.T, cfg refcount.Config, refs map[string][]string, fn func(*testing.T, *refcount.Manager, *countingStorage)) {
	for _, st := range storages {
		t.Run(st.name, func(t *testing.T) {
			s := &countingStorage{Storage: st.new(t)}
			for id, nodes := range refs {
				require.NoError(t, s.Storage.Set(t.Context(), id, refcount.New(nodes...)))
			}
			fn(t, refcount.NewManager(s, cfg), s)
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

// seed is the state the rule tables start from.
var seed = map[string][]string{
	"mine":   {"n1"},
	"shared": {"n1", "n2", "n3"},
	"theirs": {"n2"},
}

func TestShouldSkipOperation(t *testing.T) {
	tests := []struct {
		op       api.OperationType
		resource string
		skip     bool
	}{
		{api.OperationPull, "mine", true},
		{api.OperationPull, "shared", true},
		{api.OperationPull, "theirs", false},
		{api.OperationPull, "absent", false},
		{api.OperationUpdate, "mine", false},
		{api.OperationUpdate, "absent", false},
		{api.OperationDelete, "mine", false},
		{api.OperationDelete, "shared", false},
	}
	forEachStorage(t, refcount.Config{}, seed, func(t *testing.T, m *refcount.Manager, _ *countingStorage) {
		for _, tt := range tests {
			skip, reason, err := m.ShouldSkipOperation(t.Context(), tt.op, tt.resource, "n1")
			require.NoError(t, err)
			require.Equal(t, tt.skip, skip, "%s %s", tt.op, tt.resource)
			if skip {
				require.Contains(t, reason, "n1")
			} else {
				require.Empty(t, reason)
			}
		}
	})
}

func TestCanPerformOperation(t *testing.T) {
	tests := []struct {
		op                  api.OperationType
		resource            string
		updateRequiresNoRef bool
		ok                  bool
		others              string
	}{
		{op: api.OperationPull, resource: "shared", ok: true},
		{op: api.OperationPull, resource: "absent", ok: true},
		{op: api.OperationDelete, resource: "absent", ok: true},
		{op: api.OperationDelete, resource: "mine", ok: true},
		{op: api.OperationDelete, resource: "shared", others: "n2, n3"},
		{op: api.OperationDelete, resource: "theirs", others: "n2"},
		{op: api.OperationUpdate, resource: "shared", ok: true},
		{op: api.OperationUpdate, resource: "shared", updateRequiresNoRef: true, others: "n2, n3"},
		{op: api.OperationUpdate, resource: "mine", updateRequiresNoRef: true, ok: true},
		{op: api.OperationUpdate, resource: "absent", updateRequiresNoRef: true, ok: true},
	}
	for _, noRef := range []bool{false, true} {
		cfg := refcount.Config{UpdateRequiresNoRef: noRef}
		t.Run(fmt.Sprintf("UpdateRequiresNoRef=%t", noRef), func(t *testing.T) {
			forEachStorage(t, cfg, seed, func(t *testing.T, m *refcount.Manager, _ *countingStorage) {
				for _, tt := range tests {
					if tt.op == api.OperationUpdate && tt.updateRequiresNoRef != noRef {
						continue
					}
					ok, reason, err := m.CanPerformOperation(t.Context(), tt.op, tt.resource, "n1")
					require.NoError(t, err)
					require.Equal(t, tt.ok, ok, "%s %s", tt.op, tt.resource)
					if ok {
						require.Empty(t, reason)
					} else {
						require.Contains(t, reason, tt.others)
					}
				}
			})
		})
	}
}

func TestUpdateRefCount(t *testing.T) {
	tests := []struct {
		name     string
		op       api.OperationType
		resource string
		success  bool
		want     []string // nodes afterwards; nil means no entry
		writes   int64
	}{
		{"pull adds", api.OperationPull, "theirs", true, []string{"n1", "n2"}, 1},
		{"pull creates", api.OperationPull, "absent", true, []string{"n1"}, 1},
		{"pull again counts once", api.OperationPull, "mine", true, []string{"n1"}, 0},
		{"failed pull", api.OperationPull, "theirs", false, []string{"n2"}, 0},
		{"failed pull of absent", api.OperationPull, "absent", false, nil, 0},
		{"update", api.OperationUpdate, "theirs", true, []string{"n2"}, 0},
		{"failed update", api.OperationUpdate, "mine", false, []string{"n1"}, 0},
		{"delete drops", api.OperationDelete, "shared", true, nil, 1},
		{"delete absent", api.OperationDelete, "absent", true, nil, 1},
		{"failed delete", api.OperationDelete, "mine", false, []string{"n1"}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			forEachStorage(t, refcount.Config{}, seed, func(t *testing.T, m *refcount.Manager, s *countingStorage) {
				rc, err := m.UpdateRefCount(t.Context(), tt.op, tt.resource, "n1", tt.success)
				require.NoError(t, err)
				requireNodes(t, s, tt.resource, tt.want)
				require.Equal(t, len(tt.want), rc.Count)
				require.Equal(t, tt.want, nilIfEmpty(rc.NodeList()), "returned")
				require.Equal(t, tt.writes, s.writes.Load(), "writes")
			})
		})
	}
}

func TestPullTwiceCountsOnce(t *testing.T) {
	forEachStorage(t, refcount.Config{}, nil, func(t *testing.T, m *refcount.Manager, s *countingStorage) {
		for range 2 {
			_, err := m.UpdateRefCount(t.Context(), api.OperationPull, "r", "n1", true)
			require.NoError(t, err)
			_, err = m.AddRef(t.Context(), "r", "n1")
			require.NoError(t, err)
		}
		requireNodes(t, s, "r", []string{"n1"})
		require.Equal(t, int64(1), s.writes.Load(), "only the first pull writes")
	})
}

func TestAddRemoveRef(t *testing.T) {
	forEachStorage(t, refcount.Config{}, seed, func(t *testing.T, m *refcount.Manager, s *countingStorage) {
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
		require.Zero(t, rc.Count)
		requireNodes(t, s, "mine", nil)

		rc, err = m.RemoveRef(ctx, "absent", "n1")
		require.NoError(t, err)
		require.Zero(t, rc.Count)
		requireNodes(t, s, "absent", nil)
	})
}

// TestDeleteFlow is the lock server's delete: the requester first drops its
// own reference, then the delete is allowed only if no other node is left.
func TestDeleteFlow(t *testing.T) {
	forEachStorage(t, refcount.Config{}, seed, func(t *testing.T, m *refcount.Manager, _ *countingStorage) {
		ctx := t.Context()
		for resource, want := range map[string]bool{"mine": true, "shared": false} {
			_, err := m.RemoveRef(ctx, resource, "n1")
			require.NoError(t, err)
			ok, _, err := m.CanPerformOperation(ctx, api.OperationDelete, resource, "n1")
			require.NoError(t, err)
			require.Equal(t, want, ok, resource)
		}
	})
}

func TestGetRefCountAbsent(t *testing.T) {
	forEachStorage(t, refcount.Config{}, nil, func(t *testing.T, m *refcount.Manager, _ *countingStorage) {
		rc, err := m.GetRefCount(t.Context(), "absent")
		require.NoError(t, err)
		require.Zero(t, rc.Count)
		require.Empty(t, rc.Nodes)
	})
}

func TestManagerInvalidArgument(t *testing.T) {
	forEachStorage(t, refcount.Config{}, nil, func(t *testing.T, m *refcount.Manager, _ *countingStorage) {
		ctx := t.Context()
		for _, c := range []struct{ op, resource, node string }{
			{"copy", "r", "n"},
			{"", "r", "n"},
			{"pull", "", "n"},
			{"pull", "r", ""},
		} {
			op := api.OperationType(c.op)
			_, _, err := m.ShouldSkipOperation(ctx, op, c.resource, c.node)
			requireInvalid(t, err, c)
			_, _, err = m.CanPerformOperation(ctx, op, c.resource, c.node)
			requireInvalid(t, err, c)
			_, err = m.UpdateRefCount(ctx, op, c.resource, c.node, true)
			requireInvalid(t, err, c)
			if c.op == "pull" {
				_, err = m.AddRef(ctx, c.resource, c.node)
				requireInvalid(t, err, c)
				_, err = m.RemoveRef(ctx, c.resource, c.node)
				requireInvalid(t, err, c)
			}
		}
		_, err := m.GetRefCount(ctx, "")
		requireInvalid(t, err, "GetRefCount")
	})
}

func TestManagerConcurrent(t *testing.T) {
	const (
		resources = 4
		nodes     = 16
		rounds    = 5
	)
	forEachStorage(t, refcount.Config{}, nil, func(t *testing.T, m *refcount.Manager, s *countingStorage) {
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
						for _, f := range []func() (refcount.ReferenceCount, error){
							func() (refcount.ReferenceCount, error) { return m.AddRef(ctx, resource, node) },
							func() (refcount.ReferenceCount, error) { return m.RemoveRef(ctx, resource, node) },
							func() (refcount.ReferenceCount, error) { return m.AddRef(ctx, resource, node) },
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
	require.Equal(t, len(rc.Nodes), rc.Count)
	require.Equal(t, want, rc.NodeList(), resource)
}

func nilIfEmpty(s []string) []string {
	if len(s) == 0 {
		return nil
	}
	return s
}

func requireInvalid(t *testing.T, err error, what any) {
	t.Helper()
	require.True(t, errdefs.IsInvalidArgument(err), "%v: got %v", what, err)
}
