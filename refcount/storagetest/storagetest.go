// Package storagetest is the conformance suite for refcount.Storage
// implementations: reference sets, members, the identity, the fence
// high-water mark, meta values, delete markers and completions, lease
// records, Commit's all-or-nothing batches, the guard that fences a handle once another
// has taken the state over, and a node's references staying what the
// reference sets say through every kind of write (the per-node index,
// read directly through NodeRefs), RefState and Submit.
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

	"github.com/sharedcontent/sharedcontent/internal/synchash"
	"github.com/sharedcontent/sharedcontent/refcount"
)

// Run runs the suite. newStorage must return a handle on a new, empty
// state for each call; takeOver must return another handle on the state of
// s that takes it over (s's Commits fail with refcount.ErrFenced from
// then on). Both arrange for their handle to be closed when t ends
// (t.Cleanup).
func Run(t *testing.T, newStorage func(t *testing.T) refcount.Storage, takeOver func(t *testing.T, s refcount.Storage) refcount.Storage) {
	tests := []struct {
		name string
		fn   func(*testing.T, refcount.Storage)
	}{
		{"GetAbsent", testGetAbsent},
		{"AddRef", testAddRef},
		{"RemoveRef", testRemoveRef},
		{"DropRefs", testDropRefs},
		{"CloneIsolation", testCloneIsolation},
		{"ListPages", testListPages},
		{"ListLimit", testListLimit},
		{"Concurrent", testConcurrent},
		{"ContextDone", testContextDone},
		{"ReplaceNode", testReplaceNode},
		{"ReplaceNodeBuckets", testReplaceNodeBuckets},
		{"Members", testMembers},
		{"Identity", testIdentity},
		{"LeaseFenceMark", testLeaseFenceMark},
		{"Meta", testMeta},
		{"Deletes", testDeletes},
		{"Leases", testLeases},
		{"Pins", testPins},
		{"CommitRefs", testCommitRefs},
		{"CommitAtomic", testCommitAtomic},
		{"CommitEmpty", testCommitEmpty},
		{"CommitIsolation", testCommitIsolation},
		{"Closed", testClosed},
		{"RefState", testRefState},
		{"Submit", testSubmit},
		{"NodeIndex", testNodeIndex},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.fn(t, newStorage(t))
		})
	}
	t.Run("TakeOver", func(t *testing.T) { testTakeOver(t, newStorage(t), takeOver) })
	t.Run("TakeOverRace", func(t *testing.T) { testTakeOverRace(t, newStorage(t), takeOver) })
	t.Run("NodeIndexTakeOver", func(t *testing.T) { testNodeIndexTakeOver(t, newStorage(t), takeOver) })
	t.Run("PinsTakeOver", func(t *testing.T) { testPinsTakeOver(t, newStorage(t), takeOver) })
}

// TakeOverLocal is Run's takeOver for a refcount.LocalStorage.
func TakeOverLocal(t *testing.T, s refcount.Storage) refcount.Storage {
	t.Helper()
	n, err := s.(refcount.LocalStorage).TakeOver(t.Context())
	require.NoError(t, err)
	t.Cleanup(func() { n.Close() })
	return n
}

// commit commits b and requires it to succeed.
func commit(t *testing.T, s refcount.Storage, b *refcount.Batch) {
	t.Helper()
	require.NoError(t, s.Commit(t.Context(), b))
}

// refs adds nodes to the resource's reference set.
func refs(resourceID string, nodes ...string) *refcount.Batch {
	b := new(refcount.Batch)
	for _, n := range nodes {
		b.AddRef(resourceID, n)
	}
	return b
}

func testGetAbsent(t *testing.T, s refcount.Storage) {
	_, err := s.Get(t.Context(), "absent")
	require.Error(t, err)
	require.True(t, errdefs.IsNotFound(err), "got %v", err)
	require.ErrorContains(t, err, "absent", "the error names the resource")
}

func testAddRef(t *testing.T, s refcount.Storage) {
	ctx := t.Context()
	commit(t, s, refs("r1", "b", "a", "b"))
	rc, err := s.Get(ctx, "r1")
	require.NoError(t, err)
	require.Equal(t, 2, rc.Len(), "a node added twice counts once")
	require.Equal(t, []string{"a", "b"}, rc.NodeList())
	require.True(t, errdefs.IsInvalidArgument(s.Commit(ctx, new(refcount.Batch).AddRef("", "a"))))
	require.True(t, errdefs.IsInvalidArgument(s.Commit(ctx, new(refcount.Batch).AddRef("r1", ""))))
}

func testRemoveRef(t *testing.T, s refcount.Storage) {
	ctx := t.Context()
	commit(t, s, refs("r1", "a", "b"))
	commit(t, s, new(refcount.Batch).RemoveRef("r1", "a").RemoveRef("r1", "x").RemoveRef("absent", "a"))
	rc, err := s.Get(ctx, "r1")
	require.NoError(t, err)
	require.Equal(t, []string{"b"}, rc.NodeList())
	commit(t, s, new(refcount.Batch).RemoveRef("r1", "b"))
	_, err = s.Get(ctx, "r1")
	require.True(t, errdefs.IsNotFound(err), "the emptied set is dropped: %v", err)
	ids, _ := list(t, s)
	require.Empty(t, ids)
}

func testDropRefs(t *testing.T, s refcount.Storage) {
	ctx := t.Context()
	commit(t, s, refs("r1", "a", "b").AddRef("r2", "a"))
	commit(t, s, new(refcount.Batch).DropRefs("r1").DropRefs("absent"))
	_, err := s.Get(ctx, "r1")
	require.True(t, errdefs.IsNotFound(err), "got %v", err)
	_, err = s.Get(ctx, "r2")
	require.NoError(t, err, "DropRefs touched another set")
}

func testCloneIsolation(t *testing.T, s refcount.Storage) {
	ctx := t.Context()
	commit(t, s, refs("r1", "a"))
	out, err := s.Get(ctx, "r1")
	require.NoError(t, err)
	out.Add("c")
	out.Remove("a")
	page, err := s.List(ctx, "", 10)
	require.NoError(t, err)
	page[0].Refs.Add("d")

	again, err := s.Get(ctx, "r1")
	require.NoError(t, err)
	require.Equal(t, []string{"a"}, again.NodeList(), "changing a returned value changed the stored value")
	require.Equal(t, 1, again.Len())
}

// list returns the IDs and node lists of every reference set of s, in
// order, read a page of 2 at a time.
func list(t *testing.T, s refcount.Storage) (ids []string, nodes [][]string) {
	t.Helper()
	after := ""
	for {
		page, err := s.List(t.Context(), after, 2)
		require.NoError(t, err)
		for _, e := range page {
			require.NotZero(t, e.Refs.Len(), "an empty set is never stored")
			ids = append(ids, e.ResourceID)
			nodes = append(nodes, e.Refs.NodeList())
		}
		if len(page) < 2 {
			return ids, nodes
		}
		after = page[len(page)-1].ResourceID
	}
}

func testListPages(t *testing.T, s refcount.Storage) {
	ctx := t.Context()
	ids, _ := list(t, s)
	require.Empty(t, ids)
	b := new(refcount.Batch)
	for _, id := range []string{"sha256:c", "sha256:a", "sha256:b", "b", "sha256:aa"} {
		b.AddRef(id, "n-"+id)
	}
	commit(t, s, b)
	ids, nodes := list(t, s)
	require.Equal(t, []string{"b", "sha256:a", "sha256:aa", "sha256:b", "sha256:c"}, ids)
	require.Equal(t, []string{"n-sha256:aa"}, nodes[2])

	page, err := s.List(ctx, "sha256:a0", 2)
	require.NoError(t, err)
	require.Len(t, page, 2, "after need not be stored")
	require.Equal(t, "sha256:aa", page[0].ResourceID)
	require.Equal(t, "sha256:b", page[1].ResourceID)
	page, err = s.List(ctx, "sha256:c", 2)
	require.NoError(t, err)
	require.Empty(t, page)
}

func testListLimit(t *testing.T, s refcount.Storage) {
	for _, limit := range []int{0, -1} {
		_, err := s.List(t.Context(), "", limit)
		require.True(t, errdefs.IsInvalidArgument(err), "limit %d: %v", limit, err)
	}
}

func testConcurrent(t *testing.T, s refcount.Storage) {
	ctx := t.Context()
	const workers, keys = 8, 25
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for k := range keys {
				id := fmt.Sprintf("w%d-k%02d", w, k)
				if err := s.Commit(ctx, refs(id, "a", id)); err != nil {
					t.Error(err)
					return
				}
				rc, err := s.Get(ctx, id)
				if err != nil {
					t.Error(err)
					return
				}
				if rc.Len() != 2 || !rc.Has(id) {
					t.Errorf("%s: got %v", id, rc.NodeList())
				}
				if _, err := s.List(ctx, "", 10); err != nil {
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
	commit(t, s, refs("r1", "a"))
	ctx, cancel := context.WithCancel(t.Context())
	cancel()

	_, err := s.Get(ctx, "r1")
	require.ErrorIs(t, err, context.Canceled)
	_, err = s.List(ctx, "", 10)
	require.ErrorIs(t, err, context.Canceled)
	_, err = s.ListMembers(ctx)
	require.ErrorIs(t, err, context.Canceled)
	_, err = s.Identity(ctx)
	require.ErrorIs(t, err, context.Canceled)
	_, err = s.LeaseFenceMark(ctx)
	require.ErrorIs(t, err, context.Canceled)
	_, err = s.GetUint64(ctx, "u")
	require.ErrorIs(t, err, context.Canceled)
	_, err = s.GetString(ctx, "s")
	require.ErrorIs(t, err, context.Canceled)
	_, err = s.Deletes(ctx)
	require.ErrorIs(t, err, context.Canceled)
	require.ErrorIs(t, s.Commit(ctx, refs("r2", "a").DropRefs("r1")), context.Canceled)

	ids, _ := list(t, s)
	require.Equal(t, []string{"r1"}, ids, "nothing changed")
}

func testReplaceNode(t *testing.T, s refcount.Storage) {
	ctx := t.Context()
	commit(t, s, refs("a", "n").AddRef("b", "n").AddRef("b", "m").AddRef("c", "m"))
	// a: n only, dropped; b: n removed, m stays; c: n added; d: created.
	commit(t, s, new(refcount.Batch).ReplaceNode("n", map[string]struct{}{"c": {}, "d": {}}))
	ids, nodes := list(t, s)
	require.Equal(t, []string{"b", "c", "d"}, ids)
	require.Equal(t, [][]string{{"m"}, {"m", "n"}, {"n"}}, nodes)

	// nil forgets the node everywhere.
	commit(t, s, new(refcount.Batch).ReplaceNode("n", nil))
	ids, nodes = list(t, s)
	require.Equal(t, []string{"b", "c"}, ids)
	require.Equal(t, [][]string{{"m"}, {"m"}}, nodes)

	require.ErrorIs(t, s.Commit(ctx, new(refcount.Batch).ReplaceNode("", nil)), errdefs.ErrInvalidArgument)
}

// testReplaceNodeBuckets: a ReplaceNode restricted to some buckets changes
// the node's references in those buckets only (a sync by hash).
func testReplaceNodeBuckets(t *testing.T, s refcount.Storage) {
	ctx := t.Context()
	// Two resource IDs per bucket side: in and out of the replaced bucket.
	var in, out []string
	for i := 0; len(in) < 3 || len(out) < 2; i++ {
		id := fmt.Sprintf("r%d", i)
		if synchash.Bucket(id) == synchash.Bucket("r0") {
			if len(in) < 3 {
				in = append(in, id)
			}
		} else if len(out) < 2 {
			out = append(out, id)
		}
	}
	bucket := synchash.Bucket(in[0])
	commit(t, s, refs(in[0], "n").AddRef(in[1], "n").AddRef(in[1], "m").AddRef(out[0], "n"))
	// in[0] dropped, in[1] keeps m only, in[2] added; out[0] kept though
	// refs does not name it, out[1] untouched.
	commit(t, s, new(refcount.Batch).ReplaceNodeBuckets("n", []int{bucket}, map[string]struct{}{in[2]: {}}))
	has := func(id string) []string {
		rc, err := s.Get(ctx, id)
		if errdefs.IsNotFound(err) {
			return nil
		}
		require.NoError(t, err)
		return rc.NodeList()
	}
	require.Nil(t, has(in[0]))
	require.Equal(t, []string{"m"}, has(in[1]))
	require.Equal(t, []string{"n"}, has(in[2]))
	require.Equal(t, []string{"n"}, has(out[0]), "a reference outside the replaced bucket stays")

	// A resource ID outside the buckets is refused, and nothing changes.
	err := s.Commit(ctx, new(refcount.Batch).ReplaceNodeBuckets("n", []int{bucket}, map[string]struct{}{out[1]: {}}))
	require.ErrorIs(t, err, errdefs.ErrInvalidArgument)
	require.Nil(t, has(out[1]))
}

func testMembers(t *testing.T, s refcount.Storage) {
	ctx := t.Context()
	ms, err := s.ListMembers(ctx)
	require.NoError(t, err)
	require.Empty(t, ms)
	at := time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)
	commit(t, s, new(refcount.Batch).PutMember(refcount.Member{ID: "n2", FirstSeen: at}).
		PutMember(refcount.Member{ID: "n1", FirstSeen: at, LastSeen: at.Add(time.Hour), Generation: "g1"}))
	commit(t, s, new(refcount.Batch).PutMember(refcount.Member{ID: "n2", FirstSeen: at, LastSeen: at}))
	ms, err = s.ListMembers(ctx)
	require.NoError(t, err)
	require.Len(t, ms, 2)
	require.Equal(t, []string{"n1", "n2"}, []string{ms[0].ID, ms[1].ID}, "in ID order")
	require.True(t, ms[0].LastSeen.Equal(at.Add(time.Hour)))
	require.Equal(t, "g1", ms[0].Generation)
	require.True(t, ms[1].LastSeen.Equal(at), "PutMember replaces")
	commit(t, s, new(refcount.Batch).DeleteMember("n1").DeleteMember("absent"))
	ms, err = s.ListMembers(ctx)
	require.NoError(t, err)
	require.Len(t, ms, 1)
	require.Equal(t, "n2", ms[0].ID)
	require.ErrorIs(t, s.Commit(ctx, new(refcount.Batch).PutMember(refcount.Member{})), errdefs.ErrInvalidArgument)
	require.ErrorIs(t, s.Commit(ctx, new(refcount.Batch).DeleteMember("")), errdefs.ErrInvalidArgument)
}

func testIdentity(t *testing.T, s refcount.Storage) {
	ctx := t.Context()
	id, err := s.Identity(ctx)
	require.NoError(t, err)
	require.Zero(t, id, "never put")
	commit(t, s, new(refcount.Batch).PutIdentity(refcount.Identity{ClusterID: "c1", Epoch: 1}))
	commit(t, s, new(refcount.Batch).PutIdentity(refcount.Identity{ClusterID: "c1", Epoch: 1<<40 + 2}))
	id, err = s.Identity(ctx)
	require.NoError(t, err)
	require.Equal(t, refcount.Identity{ClusterID: "c1", Epoch: 1<<40 + 2}, id)
	require.ErrorIs(t, s.Commit(ctx, new(refcount.Batch).PutIdentity(refcount.Identity{Epoch: 3})), errdefs.ErrInvalidArgument,
		"an identity without a cluster ID")
	for _, key := range []string{"cluster_id", "epoch"} {
		require.ErrorIs(t, s.Commit(ctx, new(refcount.Batch).PutString(key, "x")), errdefs.ErrInvalidArgument, key)
		require.ErrorIs(t, s.Commit(ctx, new(refcount.Batch).PutUint64(key, 9)), errdefs.ErrInvalidArgument, key)
	}
	id, err = s.Identity(ctx)
	require.NoError(t, err)
	require.Equal(t, refcount.Identity{ClusterID: "c1", Epoch: 1<<40 + 2}, id, "a meta write changed the identity")

	// The cluster's root is kept with the identity, and a put without it
	// (an adoption) clears it.
	root := &refcount.RootClaim{CreatedAt: time.Date(2026, 12, 1, 21, 30, 0, 123456789, time.UTC), CreatedBy: "node-a"}
	commit(t, s, new(refcount.Batch).PutIdentity(refcount.Identity{ClusterID: "c1", Epoch: 7, Root: root}))
	id, err = s.Identity(ctx)
	require.NoError(t, err)
	require.Equal(t, refcount.Identity{ClusterID: "c1", Epoch: 7, Root: root}, id)
	commit(t, s, new(refcount.Batch).PutIdentity(refcount.Identity{ClusterID: "c2", Epoch: 8}))
	id, err = s.Identity(ctx)
	require.NoError(t, err)
	require.Equal(t, refcount.Identity{ClusterID: "c2", Epoch: 8}, id)
}

func testLeaseFenceMark(t *testing.T, s refcount.Storage) {
	ctx := t.Context()
	v, err := s.LeaseFenceMark(ctx)
	require.NoError(t, err)
	require.Zero(t, v)
	commit(t, s, new(refcount.Batch).PutLeaseFenceMark(1024))
	commit(t, s, new(refcount.Batch).PutLeaseFenceMark(2048))
	require.ErrorIs(t, s.Commit(ctx, new(refcount.Batch).PutUint64("fence_high_water_mark", 1)), errdefs.ErrInvalidArgument)
	v, err = s.LeaseFenceMark(ctx)
	require.NoError(t, err)
	require.Equal(t, uint64(2048), v)
}

func testMeta(t *testing.T, s refcount.Storage) {
	ctx := t.Context()
	v, err := s.GetUint64(ctx, "u")
	require.NoError(t, err)
	require.Zero(t, v)
	str, err := s.GetString(ctx, "s")
	require.NoError(t, err)
	require.Empty(t, str)
	commit(t, s, new(refcount.Batch).PutUint64("u", 1<<40+7).PutString("s", "cluster-a"))
	v, err = s.GetUint64(ctx, "u")
	require.NoError(t, err)
	require.Equal(t, uint64(1<<40+7), v)
	str, err = s.GetString(ctx, "s")
	require.NoError(t, err)
	require.Equal(t, "cluster-a", str)
	require.ErrorIs(t, s.Commit(ctx, new(refcount.Batch).PutUint64("", 1)), errdefs.ErrInvalidArgument)
	require.ErrorIs(t, s.Commit(ctx, new(refcount.Batch).PutString("", "x")), errdefs.ErrInvalidArgument)
}

// state is everything a Storage holds, read back through its interface.
type state struct {
	refs     map[string][]string
	members  []string
	identity refcount.Identity
	fence    uint64
	strs     map[string]string
	deletes  refcount.Deletes
	leases   []refcount.LeaseRecord
}

// snapshot reads the state of s: every reference set and member, the
// identity, the fence mark, the given meta strings and the deletes.
func snapshot(t *testing.T, s refcount.Storage, strKeys ...string) state {
	t.Helper()
	ctx := t.Context()
	st := state{refs: map[string][]string{}, strs: map[string]string{}}
	ids, nodes := list(t, s)
	for i, id := range ids {
		st.refs[id] = nodes[i]
	}
	ms, err := s.ListMembers(ctx)
	require.NoError(t, err)
	for _, m := range ms {
		st.members = append(st.members, m.ID)
	}
	st.identity, err = s.Identity(ctx)
	require.NoError(t, err)
	st.fence, err = s.LeaseFenceMark(ctx)
	require.NoError(t, err)
	for _, k := range strKeys {
		st.strs[k], err = s.GetString(ctx, k)
		require.NoError(t, err)
	}
	st.deletes, err = s.Deletes(ctx)
	require.NoError(t, err)
	st.leases = leases(t, s)
	return st
}

var (
	t0       = time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)
	marker   = refcount.DeleteMarker{Node: "n1", Fence: 7, Expires: t0.Add(15 * time.Second)}
	deletion = refcount.DeleteCompletion{Node: "n1", At: t0, Lapsed: true}
)

// testDeletes: markers and completions, and a delete's unlock in one batch.
func testDeletes(t *testing.T, s refcount.Storage) {
	ctx := t.Context()
	d, err := s.Deletes(ctx)
	require.NoError(t, err)
	require.Empty(t, d.InFlight)
	require.Empty(t, d.Completed)
	commit(t, s, refs("r2", "n2").PutDeleting("r2", marker).PutDeleted("r3", deletion))
	d, err = s.Deletes(ctx)
	require.NoError(t, err)
	require.Len(t, d.InFlight, 1)
	m := d.InFlight["r2"]
	require.Equal(t, marker.Node, m.Node)
	require.Equal(t, marker.Fence, m.Fence)
	require.True(t, marker.Expires.Equal(m.Expires))
	require.Len(t, d.Completed, 1)
	c := d.Completed["r3"]
	require.Equal(t, deletion.Node, c.Node)
	require.True(t, deletion.At.Equal(c.At))
	require.True(t, c.Lapsed)

	// The delete of r2 completes: references and marker out, completion in.
	commit(t, s, new(refcount.Batch).DropRefs("r2").DropDeleting("r2").
		PutDeleted("r2", refcount.DeleteCompletion{Node: "n1", At: t0}).DropDeleted("r3"))
	st := snapshot(t, s)
	require.Empty(t, st.refs)
	require.Empty(t, st.deletes.InFlight)
	require.Len(t, st.deletes.Completed, 1)
	require.Equal(t, "n1", st.deletes.Completed["r2"].Node)
	require.False(t, st.deletes.Completed["r2"].Lapsed)
	for _, b := range []*refcount.Batch{
		new(refcount.Batch).PutDeleting("", marker), new(refcount.Batch).DropDeleting(""),
		new(refcount.Batch).PutDeleted("", deletion), new(refcount.Batch).DropDeleted(""),
	} {
		require.ErrorIs(t, s.Commit(ctx, b), errdefs.ErrInvalidArgument)
	}
}

func testCommitRefs(t *testing.T, s refcount.Storage) {
	commit(t, s, refs("b", "n", "m").AddRef("c", "n"))
	commit(t, s, new(refcount.Batch).
		AddRef("a", "n").AddRef("a", "m").AddRef("a", "n"). // twice counts once
		RemoveRef("b", "n").
		RemoveRef("c", "n"). // the last node: the set goes
		RemoveRef("absent", "n"))
	ids, nodes := list(t, s)
	require.Equal(t, []string{"a", "b"}, ids)
	require.Equal(t, [][]string{{"m", "n"}, {"m"}}, nodes)

	// Forgetting a node: its references and its member record together.
	commit(t, s, new(refcount.Batch).PutMember(refcount.Member{ID: "m"}))
	commit(t, s, new(refcount.Batch).ReplaceNode("m", nil).DeleteMember("m"))
	ids, nodes = list(t, s)
	require.Equal(t, []string{"a"}, ids)
	require.Equal(t, [][]string{{"n"}}, nodes)
	ms, err := s.ListMembers(t.Context())
	require.NoError(t, err)
	require.Empty(t, ms)

	// Writes apply in order: a later write sees an earlier one.
	commit(t, s, new(refcount.Batch).
		ReplaceNode("x", map[string]struct{}{"d": {}}).AddRef("d", "y").RemoveRef("d", "x"))
	ids, nodes = list(t, s)
	require.Equal(t, []string{"a", "d"}, ids)
	require.Equal(t, [][]string{{"n"}, {"y"}}, nodes)
}

// testCommitAtomic: a batch with a write that cannot be made changes
// nothing, wherever that write is in the batch, and whatever Break says.
func testCommitAtomic(t *testing.T, s refcount.Storage) {
	ctx := t.Context()
	commit(t, s, refs("r1", "a").PutMember(refcount.Member{ID: "n1"}).
		PutIdentity(refcount.Identity{ClusterID: "old", Epoch: 1}).PutLeaseFenceMark(5).
		PutString("s", "old").PutDeleting("r2", marker).
		PutLease(refcount.LeaseRecord{ResourceID: "r1", Type: "pull", Node: "b", LeaseID: "l1"}))
	before := snapshot(t, s, "s")

	bad := []struct {
		name string
		add  func(*refcount.Batch)
	}{
		{"AddRef without node", func(b *refcount.Batch) { b.AddRef("r9", "") }},
		{"RemoveRef without resource", func(b *refcount.Batch) { b.RemoveRef("", "a") }},
		{"DropRefs without resource", func(b *refcount.Batch) { b.DropRefs("") }},
		{"ReplaceNode without node", func(b *refcount.Batch) { b.ReplaceNode("", nil) }},
		{"PutMember without ID", func(b *refcount.Batch) { b.PutMember(refcount.Member{}) }},
		{"PutIdentity without cluster", func(b *refcount.Batch) { b.PutIdentity(refcount.Identity{}) }},
		{"PutString without key", func(b *refcount.Batch) { b.PutString("", "x") }},
		{"PutUint64 on a reserved key", func(b *refcount.Batch) { b.PutUint64("epoch", 1) }},
		{"PutDeleted without resource", func(b *refcount.Batch) { b.PutDeleted("", deletion) }},
		{"PutLease without lease ID", func(b *refcount.Batch) { b.PutLease(refcount.LeaseRecord{ResourceID: "r7"}) }},
	}
	for _, tt := range bad {
		for _, at := range []string{"first", "middle", "last"} {
			t.Run(tt.name+"/"+at, func(t *testing.T) {
				b := new(refcount.Batch)
				if at == "first" {
					tt.add(b)
				}
				b.ReplaceNode("a", map[string]struct{}{"r5": {}}).DeleteMember("n1").AddRef("r6", "b").Break()
				if at == "middle" {
					tt.add(b)
				}
				b.PutIdentity(refcount.Identity{ClusterID: "new", Epoch: 2}).PutLeaseFenceMark(9).PutString("s", "new").Break().
					DropDeleting("r2").PutDeleted("r2", deletion).PutMember(refcount.Member{ID: "n2"}).DropLease("r1", "l1")
				if at == "last" {
					tt.add(b)
				}
				err := s.Commit(ctx, b)
				require.ErrorIs(t, err, errdefs.ErrInvalidArgument)
				require.Equal(t, before, snapshot(t, s, "s"), "a failed batch wrote something")
			})
		}
	}
}

func testCommitEmpty(t *testing.T, s refcount.Storage) {
	commit(t, s, new(refcount.Batch))
	commit(t, s, &refcount.Batch{})
	commit(t, s, new(refcount.Batch).Break())
	require.Equal(t, snapshot(t, s), snapshot(t, s))
	require.Empty(t, snapshot(t, s).refs)
}

// testCommitIsolation: changing a batch's arguments after adding them, or
// the batch after committing it, changes nothing stored.
func testCommitIsolation(t *testing.T, s refcount.Storage) {
	refs := map[string]struct{}{"r2": {}}
	m := refcount.Member{ID: "n1", Generation: "g1"}
	b := new(refcount.Batch).AddRef("r1", "a").ReplaceNode("n", refs).PutMember(m)
	refs["r3"] = struct{}{}
	m.Generation = "g2"
	commit(t, s, b)
	b.Writes()[1].NodeRefs["r4"] = struct{}{}
	ids, nodes := list(t, s)
	require.Equal(t, []string{"r1", "r2"}, ids)
	require.Equal(t, [][]string{{"a"}, {"n"}}, nodes)
	ms, err := s.ListMembers(t.Context())
	require.NoError(t, err)
	require.Equal(t, "g1", ms[0].Generation)
}

// testClosed: a closed handle neither reads nor writes; closing it again
// is harmless.
func testClosed(t *testing.T, s refcount.Storage) {
	ctx := t.Context()
	commit(t, s, refs("r1", "a"))
	require.NoError(t, s.Close())
	_, err := s.Get(ctx, "r1")
	require.Error(t, err)
	_, err = s.List(ctx, "", 10)
	require.Error(t, err)
	require.Error(t, s.Commit(ctx, refs("r2", "a")))
	require.NoError(t, s.Close())
}

// testTakeOver: once a newer handle took the state over, the older one's
// commits fail with ErrFenced and write nothing, however they mix writes;
// the older one still reads, and the newer one writes.
func testTakeOver(t *testing.T, s1 refcount.Storage, takeOver func(*testing.T, refcount.Storage) refcount.Storage) {
	ctx := t.Context()
	held := refcount.LeaseRecord{ResourceID: "r1", Type: "pull", Node: "a", RequestID: "q", LeaseID: "l1", Fence: 3}
	commit(t, s1, refs("r1", "a").PutIdentity(refcount.Identity{ClusterID: "c", Epoch: 1}).PutLease(held))
	s2 := takeOver(t, s1)
	require.Equal(t, []refcount.LeaseRecord{held}, leases(t, s2), "the new owner reads the old one's lease records")
	require.Greater(t, s2.OwnerFence(), s1.OwnerFence())
	before := snapshot(t, s2)
	for _, b := range []*refcount.Batch{
		refs("r2", "a"),
		new(refcount.Batch).RemoveRef("r1", "a"),
		new(refcount.Batch).DropRefs("r1"),
		new(refcount.Batch).ReplaceNode("a", nil),
		new(refcount.Batch).PutMember(refcount.Member{ID: "n1"}),
		new(refcount.Batch).PutIdentity(refcount.Identity{ClusterID: "c", Epoch: 2}),
		new(refcount.Batch).PutLeaseFenceMark(100),
		new(refcount.Batch).PutString("s", "x"),
		new(refcount.Batch).PutDeleting("r1", marker).Break().PutDeleted("r3", deletion),
		new(refcount.Batch).DropLease("r1", "l1"),
		new(refcount.Batch).PutLease(refcount.LeaseRecord{ResourceID: "r2", LeaseID: "l2"}),
	} {
		err := s1.Commit(ctx, b)
		require.ErrorIs(t, err, refcount.ErrFenced)
		require.True(t, errdefs.IsFailedPrecondition(err), "got %v", err)
	}
	require.Equal(t, before, snapshot(t, s2), "a fenced handle wrote")

	commit(t, s2, refs("r2", "b"))
	rc, err := s1.Get(ctx, "r2")
	require.NoError(t, err, "a fenced handle still reads")
	require.Equal(t, []string{"b"}, rc.NodeList())

	s3 := takeOver(t, s2)
	require.Greater(t, s3.OwnerFence(), s2.OwnerFence())
	require.ErrorIs(t, s2.Commit(ctx, refs("r4", "b")), refcount.ErrFenced)
	require.ErrorIs(t, s1.Commit(ctx, refs("r4", "b")), refcount.ErrFenced)
	commit(t, s3, refs("r4", "c"))
	ids, _ := list(t, s3)
	require.Equal(t, []string{"r1", "r2", "r4"}, ids)
}

// testTakeOverRace: commits racing a take-over either land before it or
// fail fenced, never after it; the newer handle sees exactly those that
// returned nil.
func testTakeOverRace(t *testing.T, s1 refcount.Storage, takeOver func(*testing.T, refcount.Storage) refcount.Storage) {
	ctx := t.Context()
	const writers, each = 4, 25
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		landed []string
	)
	start := make(chan struct{})
	for w := range writers {
		wg.Go(func() {
			<-start
			for i := range each {
				id := fmt.Sprintf("w%d-%02d", w, i)
				err := s1.Commit(ctx, refs(id, "a"))
				switch {
				case err == nil:
					mu.Lock()
					landed = append(landed, id)
					mu.Unlock()
				case !errors.Is(err, refcount.ErrFenced):
					t.Error(err)
				}
			}
		})
	}
	close(start)
	s2 := takeOver(t, s1)
	wg.Wait()
	require.ErrorIs(t, s1.Commit(ctx, refs("late", "a")), refcount.ErrFenced)
	ids, _ := list(t, s2)
	require.ElementsMatch(t, landed, ids)
}
