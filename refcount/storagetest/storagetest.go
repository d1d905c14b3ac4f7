// Package storagetest is a conformance suite for refcount.Storage
// implementations: reference sets, members, meta values, deletes, and
// Commit's all-or-nothing batches.
package storagetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

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
		{"Members", testMembers},
		{"Meta", testMeta},
		{"CommitAll", testCommitAll},
		{"CommitRefs", testCommitRefs},
		{"CommitAtomic", testCommitAtomic},
		{"CommitEmpty", testCommitEmpty},
		{"CommitContextDone", testCommitContextDone},
		{"CommitIsolation", testCommitIsolation},
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

func testMembers(t *testing.T, s refcount.Storage) {
	ctx := t.Context()
	ms, err := s.ListMembers(ctx)
	require.NoError(t, err)
	require.Empty(t, ms)
	at := time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)
	require.NoError(t, s.PutMember(ctx, refcount.Member{ID: "n2", FirstSeen: at}))
	require.NoError(t, s.PutMember(ctx, refcount.Member{ID: "n1", FirstSeen: at, LastSeen: at.Add(time.Hour)}))
	require.NoError(t, s.PutMember(ctx, refcount.Member{ID: "n2", FirstSeen: at, LastSeen: at}), "PutMember replaces")
	ms, err = s.ListMembers(ctx)
	require.NoError(t, err)
	require.Len(t, ms, 2)
	require.Equal(t, []string{"n1", "n2"}, []string{ms[0].ID, ms[1].ID}, "in ID order")
	require.True(t, ms[0].LastSeen.Equal(at.Add(time.Hour)))
	require.True(t, ms[1].LastSeen.Equal(at))
	require.NoError(t, s.DeleteMember(ctx, "n1"))
	require.NoError(t, s.DeleteMember(ctx, "absent"))
	ms, err = s.ListMembers(ctx)
	require.NoError(t, err)
	require.Len(t, ms, 1)
	require.Equal(t, "n2", ms[0].ID)
	require.ErrorIs(t, s.PutMember(ctx, refcount.Member{}), errdefs.ErrInvalidArgument)
}

func testMeta(t *testing.T, s refcount.Storage) {
	ctx := t.Context()
	v, err := s.GetUint64(ctx, "u")
	require.NoError(t, err)
	require.Zero(t, v)
	str, err := s.GetString(ctx, "s")
	require.NoError(t, err)
	require.Empty(t, str)
	require.NoError(t, s.PutUint64(ctx, "u", 1<<40+7))
	require.NoError(t, s.PutString(ctx, "s", "cluster-a"))
	v, err = s.GetUint64(ctx, "u")
	require.NoError(t, err)
	require.Equal(t, uint64(1<<40+7), v)
	str, err = s.GetString(ctx, "s")
	require.NoError(t, err)
	require.Equal(t, "cluster-a", str)
	require.ErrorIs(t, s.PutUint64(ctx, "", 1), errdefs.ErrInvalidArgument)
	require.ErrorIs(t, s.PutString(ctx, "", "x"), errdefs.ErrInvalidArgument)
}

// state is everything a Storage holds, read back through its interface.
type state struct {
	refs    map[string][]string
	members []string
	strs    map[string]string
	uints   map[string]uint64
	deletes refcount.Deletes
}

// snapshot reads the state of s: every reference set and member, the
// given meta keys, and the deletes.
func snapshot(t *testing.T, s refcount.Storage, strKeys, uintKeys []string) state {
	t.Helper()
	ctx := t.Context()
	st := state{refs: map[string][]string{}, strs: map[string]string{}, uints: map[string]uint64{}}
	ids, nodes := list(t, s)
	for i, id := range ids {
		st.refs[id] = nodes[i]
	}
	ms, err := s.ListMembers(ctx)
	require.NoError(t, err)
	for _, m := range ms {
		st.members = append(st.members, m.ID)
	}
	for _, k := range strKeys {
		st.strs[k], err = s.GetString(ctx, k)
		require.NoError(t, err)
	}
	for _, k := range uintKeys {
		st.uints[k], err = s.GetUint64(ctx, k)
		require.NoError(t, err)
	}
	st.deletes, err = s.Deletes(ctx)
	require.NoError(t, err)
	return st
}

var (
	t0       = time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)
	marker   = refcount.DeleteMarker{Node: "n1", Fence: 7, Expires: t0.Add(15 * time.Second)}
	deletion = refcount.DeleteCompletion{Node: "n1", At: t0, Lapsed: true}
)

func testCommitAll(t *testing.T, s refcount.Storage) {
	ctx := t.Context()
	require.NoError(t, s.Set(ctx, "gone", refcount.New("n1")))
	require.NoError(t, s.PutMember(ctx, refcount.Member{ID: "old"}))
	b := new(refcount.Batch).
		SetRefs("r1", refcount.New("a", "b")).
		DropRefs("gone").
		PutMember(refcount.Member{ID: "n1", FirstSeen: t0}).
		DeleteMember("old").
		PutString("cluster_id", "c1").
		PutUint64("epoch", 3).
		PutDeleting("r2", marker).
		PutDeleted("r3", deletion)
	require.Equal(t, 8, b.Len())
	require.NoError(t, s.Commit(ctx, b))
	st := snapshot(t, s, []string{"cluster_id"}, []string{"epoch"})
	require.Equal(t, map[string][]string{"r1": {"a", "b"}}, st.refs)
	require.Equal(t, []string{"n1"}, st.members)
	require.Equal(t, "c1", st.strs["cluster_id"])
	require.Equal(t, uint64(3), st.uints["epoch"])
	require.Len(t, st.deletes.InFlight, 1)
	m := st.deletes.InFlight["r2"]
	require.Equal(t, marker.Node, m.Node)
	require.Equal(t, marker.Fence, m.Fence)
	require.True(t, marker.Expires.Equal(m.Expires))
	require.Len(t, st.deletes.Completed, 1)
	c := st.deletes.Completed["r3"]
	require.Equal(t, deletion.Node, c.Node)
	require.True(t, deletion.At.Equal(c.At))
	require.True(t, c.Lapsed)

	// The delete of r2 completes: marker and references out, completion in.
	require.NoError(t, s.Commit(ctx, new(refcount.Batch).DropRefs("r2").DropDeleting("r2").
		PutDeleted("r2", refcount.DeleteCompletion{Node: "n1", At: t0}).DropDeleted("r3")))
	d, err := s.Deletes(ctx)
	require.NoError(t, err)
	require.Empty(t, d.InFlight)
	require.Len(t, d.Completed, 1)
	require.False(t, d.Completed["r2"].Lapsed)
}

func testCommitRefs(t *testing.T, s refcount.Storage) {
	ctx := t.Context()
	require.NoError(t, s.Set(ctx, "b", refcount.New("n", "m")))
	require.NoError(t, s.Set(ctx, "c", refcount.New("n")))
	require.NoError(t, s.Commit(ctx, new(refcount.Batch).
		AddRef("a", "n").AddRef("a", "m").AddRef("a", "n"). // twice counts once
		RemoveRef("b", "n").
		RemoveRef("c", "n"). // the last node: the entry goes
		RemoveRef("absent", "n")))
	ids, nodes := list(t, s)
	require.Equal(t, []string{"a", "b"}, ids)
	require.Equal(t, [][]string{{"m", "n"}, {"m"}}, nodes)

	// Forgetting a node: its references and its member record together.
	require.NoError(t, s.PutMember(ctx, refcount.Member{ID: "m"}))
	require.NoError(t, s.Commit(ctx, new(refcount.Batch).ReplaceNode("m", nil).DeleteMember("m")))
	ids, nodes = list(t, s)
	require.Equal(t, []string{"a"}, ids)
	require.Equal(t, [][]string{{"n"}}, nodes)
	ms, err := s.ListMembers(ctx)
	require.NoError(t, err)
	require.Empty(t, ms)

	// Writes apply in order: a later write sees an earlier one.
	require.NoError(t, s.Commit(ctx, new(refcount.Batch).
		ReplaceNode("x", map[string]struct{}{"d": {}}).AddRef("d", "y").RemoveRef("d", "x")))
	ids, nodes = list(t, s)
	require.Equal(t, []string{"a", "d"}, ids)
	require.Equal(t, [][]string{{"n"}, {"y"}}, nodes)
}

// testCommitAtomic: a batch with a write that cannot be made changes
// nothing, wherever that write is in the batch.
func testCommitAtomic(t *testing.T, s refcount.Storage) {
	ctx := t.Context()
	require.NoError(t, s.Commit(ctx, new(refcount.Batch).
		SetRefs("r1", refcount.New("a")).PutMember(refcount.Member{ID: "n1"}).
		PutString("cluster_id", "old").PutUint64("epoch", 1).PutDeleting("r2", marker)))
	keysS, keysU := []string{"cluster_id"}, []string{"epoch"}
	before := snapshot(t, s, keysS, keysU)

	bad := []struct {
		name string
		add  func(*refcount.Batch)
	}{
		{"AddRef without node", func(b *refcount.Batch) { b.AddRef("r9", "") }},
		{"RemoveRef without resource", func(b *refcount.Batch) { b.RemoveRef("", "a") }},
		{"SetRefs without resource", func(b *refcount.Batch) { b.SetRefs("", refcount.New("a")) }},
		{"ReplaceNode without node", func(b *refcount.Batch) { b.ReplaceNode("", nil) }},
		{"PutMember without ID", func(b *refcount.Batch) { b.PutMember(refcount.Member{}) }},
		{"PutString without key", func(b *refcount.Batch) { b.PutString("", "x") }},
		{"PutDeleted without resource", func(b *refcount.Batch) { b.PutDeleted("", deletion) }},
	}
	for _, tt := range bad {
		for _, at := range []string{"first", "middle", "last"} {
			t.Run(tt.name+"/"+at, func(t *testing.T) {
				b := new(refcount.Batch)
				if at == "first" {
					tt.add(b)
				}
				b.ReplaceNode("a", map[string]struct{}{"r5": {}}).DeleteMember("n1").AddRef("r6", "b")
				if at == "middle" {
					tt.add(b)
				}
				b.PutString("cluster_id", "new").PutUint64("epoch", 2).DropDeleting("r2").
					PutDeleted("r2", deletion).PutMember(refcount.Member{ID: "n2"})
				if at == "last" {
					tt.add(b)
				}
				err := s.Commit(ctx, b)
				require.ErrorIs(t, err, errdefs.ErrInvalidArgument)
				require.Equal(t, before, snapshot(t, s, keysS, keysU), "a failed batch wrote something")
			})
		}
	}
}

func testCommitEmpty(t *testing.T, s refcount.Storage) {
	require.NoError(t, s.Commit(t.Context(), new(refcount.Batch)))
	require.NoError(t, s.Commit(t.Context(), &refcount.Batch{}))
}

func testCommitContextDone(t *testing.T, s refcount.Storage) {
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	require.ErrorIs(t, s.Commit(ctx, new(refcount.Batch).SetRefs("r1", refcount.New("a"))), context.Canceled)
	_, err := s.Deletes(ctx)
	require.ErrorIs(t, err, context.Canceled)
	_, err = s.ListMembers(ctx)
	require.ErrorIs(t, err, context.Canceled)
	ids, _ := list(t, s)
	require.Empty(t, ids)
}

// testCommitIsolation: changing a batch's arguments after adding them, or
// the batch after committing it, changes nothing stored.
func testCommitIsolation(t *testing.T, s refcount.Storage) {
	ctx := t.Context()
	rc := refcount.New("a")
	refs := map[string]struct{}{"r2": {}}
	b := new(refcount.Batch).SetRefs("r1", rc).ReplaceNode("n", refs)
	rc.Add("b")
	refs["r3"] = struct{}{}
	require.NoError(t, s.Commit(ctx, b))
	b.Ops()[0].Refs.Add("c")
	ids, nodes := list(t, s)
	require.Equal(t, []string{"r1", "r2"}, ids)
	require.Equal(t, [][]string{{"a"}, {"n"}}, nodes)
}
