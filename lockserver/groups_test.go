package lockserver

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sharedcontent/sharedcontent/lockserver/api"
	"github.com/sharedcontent/sharedcontent/refcount"
)

// A store with a limit per transaction (etcd, docs/design.md §7.1)
// commits a big batch one atomic group after the other and may stop
// between two: a failure, or a failover whose new leader reads what was
// committed. These tests stop the coordinator's big batches (a sync, a
// forget, an adoption) after every few group prefixes and check what the
// ordering promises: the node is not synced and no record claims what is
// not stored (members.go applySync, forgetLocked; cluster.go Adopt).

// errStopped is what a stopAfter store answers once it stopped.
var errStopped = errors.New("the store stopped between two transactions")

// stopAfter is a store that commits only the first n atomic groups of a
// batch that has more (n < 0: every batch whole), then fails, as etcd's
// store does when its (n+1)th transaction fails. It records the group
// count of the last batch it committed whole.
type stopAfter struct {
	refcount.Storage
	n    atomic.Int64
	last atomic.Int64
}

func newStopAfter(s refcount.Storage) *stopAfter {
	w := &stopAfter{Storage: s}
	w.n.Store(-1)
	return w
}

func (s *stopAfter) Commit(ctx context.Context, b *refcount.Batch) error {
	n := int(s.n.Load())
	if n < 0 || len(b.Groups()) <= n {
		s.last.Store(int64(len(b.Groups())))
		return s.Storage.Commit(ctx, b)
	}
	if err := s.Storage.Commit(ctx, b.Head(n)); err != nil {
		return err
	}
	return errStopped
}

// coordinatorOn starts a Coordinator on s, closed when t ends.
func coordinatorOn(t *testing.T, s refcount.Storage) *Coordinator {
	t.Helper()
	c, err := NewCoordinator(DefaultConfig(), Options{Refs: refcount.NewManager(s)})
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	return c
}

// failover opens a handle that takes s over and starts a new Coordinator
// on it, as a new leader does; the old Coordinator is closed (its writes
// are fenced).
func failover(t *testing.T, old *Coordinator, s refcount.LocalStorage) (*Coordinator, refcount.LocalStorage) {
	t.Helper()
	s2, err := s.TakeOver(context.Background())
	require.NoError(t, err)
	old.Close()
	return coordinatorOn(t, s2), s2
}

// prefixes returns the group counts a test stops a batch of groups
// groups after: the first few, one in the middle and the last few.
func prefixes(groups int) []int {
	var out []int
	for _, k := range []int{0, 1, 2, groups / 2, groups - 2, groups - 1} {
		if k >= 0 && k < groups && !slices.Contains(out, k) {
			out = append(out, k)
		}
	}
	return out
}

// storedRefs returns the resources node references in s.
func storedRefs(t *testing.T, s refcount.Storage, node string) []string {
	t.Helper()
	var out []string
	after := ""
	for {
		page, err := s.List(context.Background(), after, 1000)
		require.NoError(t, err)
		for _, e := range page {
			if e.Refs.Has(node) {
				out = append(out, e.ResourceID)
			}
		}
		if len(page) < 1000 {
			return out
		}
		after = page[len(page)-1].ResourceID
	}
}

// storedMember returns node's stored member record, and whether there is
// one.
func storedMember(t *testing.T, s refcount.Storage, node string) (refcount.Member, bool) {
	t.Helper()
	recs, err := s.ListMembers(context.Background())
	require.NoError(t, err)
	for _, r := range recs {
		if r.ID == node {
			return r, true
		}
	}
	return refcount.Member{}, false
}

// missing returns the IDs of want that stored lacks.
func missing(stored, want []string) []string {
	var out []string
	for _, id := range want {
		if !slices.Contains(stored, id) {
			out = append(out, id)
		}
	}
	return out
}

// sorted returns ids sorted (a copy).
func sorted(ids []string) []string { return slices.Sorted(slices.Values(ids)) }

// TestSyncStoppedBetweenGroups: a full sync stopped after any prefix of
// its groups leaves the node unsynced, its new generation unrecorded
// unless every reference of it is stored, and its hash not offered (the
// next sync sends the whole journal); after a failover the node syncs
// again, by hash, to exactly its journal.
func TestSyncStoppedBetweenGroups(t *testing.T) {
	ctx := context.Background()
	const node = "n1"
	j1 := ids(300, "a")
	j2 := append(ids(300, "b"), j1[:100]...) // a new journal: 300 added, 200 dropped

	// setup: a member synced from generation g1 with j1, on a fresh
	// store; its session reopened, so it syncs again.
	setup := func(t *testing.T) (*Coordinator, *stopAfter, refcount.LocalStorage) {
		mem := refcount.NewMemoryStorage()
		w := newStopAfter(mem)
		c := coordinatorOn(t, w)
		session(t, c, node)
		syncFull(t, c, node, "g1", j1)
		require.True(t, synced(t, c, node))
		reopen(t, c, node)
		return c, w, mem
	}

	for _, gen := range []string{"g2", "g1"} { // only adds; replaces
		t.Run("generation "+gen, func(t *testing.T) {
			c, w, _ := setup(t)
			syncFull(t, c, node, gen, j2)
			groups := int(w.last.Load())
			require.Greater(t, groups, 2, "the sync is one group: nothing is split")
			want := sorted(j2)
			if gen == "g2" {
				want = sorted(append(ids(300, "b"), j1...)) // a new generation only adds
			}
			require.Equal(t, want, storedRefs(t, w, node))

			for _, k := range prefixes(groups) {
				t.Run(fmt.Sprint(k), func(t *testing.T) {
					c, w, mem := setup(t)
					w.n.Store(int64(k))
					req := api.SyncRequest{SyncID: "s-" + gen, ResourceIDs: j2, Generation: gen, Done: true, Echo: echoOf(c, node)}
					_, err := c.SyncRefs(ctx, node, req)
					require.ErrorIs(t, err, errStopped)
					require.False(t, synced(t, c, node), "a sync stopped after %d of %d groups made the node synced", k, groups)
					rec, ok := storedMember(t, w, node)
					require.True(t, ok)
					if gen != "g1" && rec.Generation == gen {
						require.Empty(t, missing(storedRefs(t, w, node), j2),
							"generation %s recorded after %d of %d groups before its references", gen, k, groups)
					}
					resp, err := c.SyncRefs(ctx, node, api.SyncRequest{SyncID: "again", ResourceIDs: []string{}, Generation: gen, Offset: new(int)})
					require.NoError(t, err)
					require.False(t, resp.ByHash, "the node's hash is offered after a sync stopped in part")

					// A new leader reads what was committed: the node is
					// not synced and syncs again, by hash if its record
					// is of this generation, to exactly its journal.
					l2, s2 := failover(t, c, mem)
					session(t, l2, node)
					require.False(t, synced(t, l2, node))
					if rec.Generation == gen {
						(&hashNode{t: t, coord: l2, id: node, gen: gen}).sync("after", j2...)
					} else {
						syncFull(t, l2, node, gen, j2)
					}
					require.True(t, synced(t, l2, node))
					require.Equal(t, want, storedRefs(t, s2, node))
				})
			}
		})
	}
}

// TestForgetStoppedBetweenGroups: a forget stopped after any prefix of
// its groups keeps the member (unsynced: deletes wait for it), and
// running it again completes it.
func TestForgetStoppedBetweenGroups(t *testing.T) {
	ctx := context.Background()
	const node = "n1"
	journal := ids(300, "a")
	setup := func(t *testing.T) (*Coordinator, *stopAfter) {
		mem := refcount.NewMemoryStorage()
		c := coordinatorOn(t, mem)
		session(t, c, node)
		syncFull(t, c, node, "g1", journal)
		// A new leader: the node's session is gone, so it may be
		// forgotten.
		s2, err := mem.TakeOver(ctx)
		require.NoError(t, err)
		c.Close()
		w := newStopAfter(s2)
		return coordinatorOn(t, w), w
	}
	c, w := setup(t)
	require.NoError(t, c.Forget(ctx, node))
	groups := int(w.last.Load())
	require.Greater(t, groups, 2, "the forget is one group: nothing is split")
	require.Empty(t, storedRefs(t, w, node))

	for _, k := range prefixes(groups) {
		t.Run(fmt.Sprint(k), func(t *testing.T) {
			c, w := setup(t)
			w.n.Store(int64(k))
			require.ErrorIs(t, c.Forget(ctx, node), errStopped)
			_, ok := storedMember(t, w, node)
			require.True(t, ok, "a forget stopped after %d of %d groups deleted the member", k, groups)
			var unsynced *api.UnsyncedError
			require.ErrorAs(t, c.references.checkDeleteRule(ctx, journal[0], api.ReapDangling, node, c.now()), &unsynced)
			require.Equal(t, []string{node}, unsynced.Nodes, "deletes no longer wait for the member")

			w.n.Store(-1)
			require.NoError(t, c.Forget(ctx, node), "the same command completes the forget")
			require.Empty(t, storedRefs(t, w, node))
			_, ok = storedMember(t, w, node)
			require.False(t, ok)
		})
	}
}

// TestAdoptStoppedBetweenGroups: an adoption stopped after any prefix of
// its groups leaves the old identity (with some of the new members,
// unsynced), never the new identity without every member.
func TestAdoptStoppedBetweenGroups(t *testing.T) {
	ctx := context.Background()
	nodes := ids(300, "node-")
	setup := func(t *testing.T) (*Coordinator, *stopAfter) {
		w := newStopAfter(refcount.NewMemoryStorage())
		return coordinatorOn(t, w), w
	}
	coord, w := setup(t)
	_, err := coord.Adopt(ctx, api.AdoptRequest{ClusterID: "adopted", Nodes: nodes})
	require.NoError(t, err)
	groups := int(w.last.Load())
	require.Greater(t, groups, 2, "the adoption is one group: nothing is split")

	for _, k := range prefixes(groups) {
		t.Run(fmt.Sprint(k), func(t *testing.T) {
			coord, w := setup(t)
			before := coord.Cluster()
			w.n.Store(int64(k))
			_, err := coord.Adopt(ctx, api.AdoptRequest{ClusterID: "adopted", Nodes: nodes})
			require.ErrorIs(t, err, errStopped)
			id, err := w.Identity(ctx)
			require.NoError(t, err)
			recs, err := w.ListMembers(ctx)
			require.NoError(t, err)
			if id.ClusterID == "adopted" {
				require.Len(t, recs, len(nodes), "the identity was adopted after %d of %d groups before every member", k, groups)
			}
			require.Equal(t, before, coord.Cluster(), "the coordinator's identity moved on a failed adoption")

			w.n.Store(-1)
			c, err := coord.Adopt(ctx, api.AdoptRequest{ClusterID: "adopted", Nodes: nodes})
			require.NoError(t, err, "the same command completes the adoption")
			require.Equal(t, "adopted", c.ClusterID)
			recs, err = w.ListMembers(ctx)
			require.NoError(t, err)
			require.Len(t, recs, len(nodes))
		})
	}
}

// TestAdoptResumedAfterFailover: an adoption stopped between two groups,
// then a failover: the new leader loads the members written so far, and
// the same command completes the adoption without --force. A coordinator
// with members of its own still refuses another cluster's adoption.
//
// Before: the new leader counted the adoption's own members as another
// cluster's and refused the re-run until --force.
func TestAdoptResumedAfterFailover(t *testing.T) {
	ctx := context.Background()
	nodes := ids(300, "node-")
	w := newStopAfter(refcount.NewMemoryStorage())
	coord := coordinatorOn(t, w)
	w.n.Store(2)
	_, err := coord.Adopt(ctx, api.AdoptRequest{ClusterID: "adopted", Nodes: nodes})
	require.ErrorIs(t, err, errStopped)
	recs, err := w.ListMembers(ctx)
	require.NoError(t, err)
	require.NotEmpty(t, recs, "part of the members were written")
	require.Less(t, len(recs), len(nodes))
	coord.Close()

	w.n.Store(-1)
	coord = coordinatorOn(t, w) // the new leader
	require.NotEqual(t, "adopted", coord.Cluster().ClusterID)
	c, err := coord.Adopt(ctx, api.AdoptRequest{ClusterID: "adopted", Nodes: nodes})
	require.NoError(t, err, "the same command completes the adoption")
	require.Equal(t, "adopted", c.ClusterID)
	recs, err = w.ListMembers(ctx)
	require.NoError(t, err)
	require.Len(t, recs, len(nodes))

	_, err = coord.Adopt(ctx, api.AdoptRequest{ClusterID: "another", Nodes: nodes})
	require.ErrorIs(t, err, api.ErrMemberLive, "members of the adopted cluster are this coordinator's own now")
}
