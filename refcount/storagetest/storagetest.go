// Package storagetest is a conformance suite for refcount.Storage
// implementations.
package storagetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/containerd/errdefs"
	"github.com/stretchr/testify/require"

	"github.com/sharedcontent/sharedcontent/refcount"
)

// Run runs the suite. newStorage must return a new, empty Storage for each
// call and arrange for it to be closed when t ends (t.Cleanup).
func Run(t *testing.T, newStorage func(t *testing.T) refcount.Storage) {
	tests := []struct {
		name string
		fn   func(*testing.T, refcount.Storage)
	}{
		{"GetAbsent", testGetAbsent},
		{"SetGet", testSetGet},
		{"SetRecomputesCount", testSetRecomputesCount},
		{"SetEmptySet", testSetEmptySet},
		{"SetEmptyID", testSetEmptyID},
		{"CloneIsolation", testCloneIsolation},
		{"Delete", testDelete},
		{"DeleteAbsent", testDeleteAbsent},
		{"ListOrder", testListOrder},
		{"ListStop", testListStop},
		{"ListCallsBack", testListCallsBack},
		{"Concurrent", testConcurrent},
		{"ContextDone", testContextDone},
		{"ReplaceNode", testReplaceNode},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.fn(t, newStorage(t))
		})
	}
}

func testGetAbsent(t *testing.T, s refcount.Storage) {
	_, err := s.Get(t.Context(), "absent")
	require.Error(t, err)
	require.True(t, errdefs.IsNotFound(err), "got %v", err)
	require.ErrorContains(t, err, "absent", "the error names the resource")
}

func testSetGet(t *testing.T, s refcount.Storage) {
	ctx := t.Context()
	require.NoError(t, s.Set(ctx, "r1", refcount.New("b", "a")))
	rc, err := s.Get(ctx, "r1")
	require.NoError(t, err)
	require.Equal(t, 2, rc.Count)
	require.Equal(t, []string{"a", "b"}, rc.NodeList())

	require.NoError(t, s.Set(ctx, "r1", refcount.New("c")), "Set replaces")
	rc, err = s.Get(ctx, "r1")
	require.NoError(t, err)
	require.Equal(t, 1, rc.Count)
	require.Equal(t, []string{"c"}, rc.NodeList())
}

func testSetRecomputesCount(t *testing.T, s refcount.Storage) {
	ctx := t.Context()
	rc := refcount.New("a")
	rc.Count = 7
	require.NoError(t, s.Set(ctx, "r1", rc))
	got, err := s.Get(ctx, "r1")
	require.NoError(t, err)
	require.Equal(t, 1, got.Count, "Count is len(Nodes), whatever was passed")
}

func testSetEmptySet(t *testing.T, s refcount.Storage) {
	ctx := t.Context()
	require.NoError(t, s.Set(ctx, "r1", refcount.ReferenceCount{}))
	rc, err := s.Get(ctx, "r1")
	require.NoError(t, err, "an empty set is an entry")
	require.Zero(t, rc.Count)
	require.Empty(t, rc.Nodes)
}

func testSetEmptyID(t *testing.T, s refcount.Storage) {
	err := s.Set(t.Context(), "", refcount.New("a"))
	require.True(t, errdefs.IsInvalidArgument(err), "got %v", err)
}

func testCloneIsolation(t *testing.T, s refcount.Storage) {
	ctx := t.Context()
	in := refcount.New("a")
	require.NoError(t, s.Set(ctx, "r1", in))
	in.Add("b")

	out, err := s.Get(ctx, "r1")
	require.NoError(t, err)
	require.Equal(t, []string{"a"}, out.NodeList(), "changing Set's argument changed the stored value")
	out.Add("c")
	out.Remove("a")

	require.NoError(t, s.List(ctx, func(_ string, rc refcount.ReferenceCount) error {
		rc.Add("d")
		return nil
	}))

	again, err := s.Get(ctx, "r1")
	require.NoError(t, err)
	require.Equal(t, []string{"a"}, again.NodeList(), "changing a returned value changed the stored value")
	require.Equal(t, 1, again.Count)
}

func testDelete(t *testing.T, s refcount.Storage) {
	ctx := t.Context()
	require.NoError(t, s.Set(ctx, "r1", refcount.New("a")))
	require.NoError(t, s.Set(ctx, "r2", refcount.New("a")))
	require.NoError(t, s.Delete(ctx, "r1"))
	_, err := s.Get(ctx, "r1")
	require.True(t, errdefs.IsNotFound(err), "got %v", err)
	_, err = s.Get(ctx, "r2")
	require.NoError(t, err, "Delete touched another entry")
}

func testDeleteAbsent(t *testing.T, s refcount.Storage) {
	require.NoError(t, s.Delete(t.Context(), "absent"))
}

// list returns the IDs and node lists that s.List yields, in order.
func list(t *testing.T, s refcount.Storage) (ids []string, nodes [][]string) {
	t.Helper()
	require.NoError(t, s.List(t.Context(), func(id string, rc refcount.ReferenceCount) error {
		require.Equal(t, len(rc.Nodes), rc.Count)
		ids = append(ids, id)
		nodes = append(nodes, rc.NodeList())
		return nil
	}))
	return ids, nodes
}

func testListOrder(t *testing.T, s refcount.Storage) {
	ctx := t.Context()
	ids, _ := list(t, s)
	require.Empty(t, ids)

	for _, id := range []string{"sha256:c", "sha256:a", "sha256:b", "b", "sha256:aa"} {
		require.NoError(t, s.Set(ctx, id, refcount.New("n-"+id)))
	}
	ids, nodes := list(t, s)
	require.Equal(t, []string{"b", "sha256:a", "sha256:aa", "sha256:b", "sha256:c"}, ids)
	require.Equal(t, []string{"n-sha256:aa"}, nodes[2])
}

func testListStop(t *testing.T, s refcount.Storage) {
	ctx := t.Context()
	for _, id := range []string{"a", "b", "c", "d"} {
		require.NoError(t, s.Set(ctx, id, refcount.New("n")))
	}
	stop := errors.New("stop")
	var seen []string
	err := s.List(ctx, func(id string, _ refcount.ReferenceCount) error {
		seen = append(seen, id)
		if len(seen) == 2 {
			return fmt.Errorf("at %s: %w", id, stop)
		}
		return nil
	})
	require.ErrorIs(t, err, stop)
	require.Equal(t, []string{"a", "b"}, seen)
}

func testListCallsBack(t *testing.T, s refcount.Storage) {
	ctx := t.Context()
	for _, id := range []string{"a", "b", "c"} {
		require.NoError(t, s.Set(ctx, id, refcount.New("n")))
	}
	// fn may use the Storage, e.g. to garbage-collect empty entries.
	require.NoError(t, s.List(ctx, func(id string, rc refcount.ReferenceCount) error {
		if id == "b" {
			return s.Delete(ctx, id)
		}
		rc.Add("m")
		return s.Set(ctx, id, rc)
	}))
	ids, nodes := list(t, s)
	require.Equal(t, []string{"a", "c"}, ids)
	require.Equal(t, [][]string{{"m", "n"}, {"m", "n"}}, nodes)
}

func testConcurrent(t *testing.T, s refcount.Storage) {
	ctx := t.Context()
	const workers, keys = 8, 25
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for k := range keys {
				id := fmt.Sprintf("w%d-k%02d", w, k)
				if err := s.Set(ctx, id, refcount.New("a", id)); err != nil {
					t.Error(err)
					return
				}
				rc, err := s.Get(ctx, id)
				if err != nil {
					t.Error(err)
					return
				}
				if rc.Count != 2 || !rc.Has(id) {
					t.Errorf("%s: got %v", id, rc.NodeList())
				}
				if err := s.List(ctx, func(string, refcount.ReferenceCount) error { return nil }); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	ids, _ := list(t, s)
	require.Len(t, ids, workers*keys)
}

func testContextDone(t *testing.T, s refcount.Storage) {
	require.NoError(t, s.Set(t.Context(), "r1", refcount.New("a")))
	ctx, cancel := context.WithCancel(t.Context())
	cancel()

	_, err := s.Get(ctx, "r1")
	require.ErrorIs(t, err, context.Canceled)
	require.ErrorIs(t, s.Set(ctx, "r2", refcount.New("a")), context.Canceled)
	require.ErrorIs(t, s.Delete(ctx, "r1"), context.Canceled)
	called := false
	err = s.List(ctx, func(string, refcount.ReferenceCount) error { called = true; return nil })
	require.ErrorIs(t, err, context.Canceled)
	require.False(t, called)

	// Nothing changed.
	ids, _ := list(t, s)
	require.Equal(t, []string{"r1"}, ids)
}

func testReplaceNode(t *testing.T, s refcount.Storage) {
	ctx := t.Context()
	require.NoError(t, s.Set(ctx, "a", refcount.New("n")))      // n only: dropped
	require.NoError(t, s.Set(ctx, "b", refcount.New("n", "m"))) // n removed, m stays
	require.NoError(t, s.Set(ctx, "c", refcount.New("m")))      // n added
	require.NoError(t, s.ReplaceNode(ctx, "n", map[string]struct{}{"c": {}, "d": {}}))
	ids, nodes := list(t, s)
	require.Equal(t, []string{"b", "c", "d"}, ids)
	require.Equal(t, [][]string{{"m"}, {"m", "n"}, {"n"}}, nodes)

	// nil forgets the node everywhere.
	require.NoError(t, s.ReplaceNode(ctx, "n", nil))
	ids, nodes = list(t, s)
	require.Equal(t, []string{"b", "c"}, ids)
	require.Equal(t, [][]string{{"m"}, {"m"}}, nodes)

	require.ErrorIs(t, s.ReplaceNode(ctx, "", nil), errdefs.ErrInvalidArgument)
}
