package lockserver

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/sharedcontent/sharedcontent/internal/synchash"
	"github.com/sharedcontent/sharedcontent/internal/testutil/etcdtest"
	"github.com/sharedcontent/sharedcontent/lockserver/api"
	"github.com/sharedcontent/sharedcontent/refcount"
	"github.com/sharedcontent/sharedcontent/refcount/etcdstore"
)

// storedState is what a test compares of two stores: every reference
// set, the members (ID, generation, bystander) and the identity.
type storedState struct {
	Refs     []refcount.Entry
	Members  []refcount.Member
	Identity refcount.Identity
}

func readState(t *testing.T, s refcount.Storage) storedState {
	t.Helper()
	ctx := context.Background()
	var out storedState
	after := ""
	for {
		page, err := s.List(ctx, after, 1000)
		require.NoError(t, err)
		out.Refs = append(out.Refs, page...)
		if len(page) < 1000 {
			break
		}
		after = page[len(page)-1].ResourceID
	}
	recs, err := s.ListMembers(ctx)
	require.NoError(t, err)
	for _, r := range recs {
		out.Members = append(out.Members, refcount.Member{ID: r.ID, Generation: r.Generation, Bystander: r.Bystander})
	}
	out.Identity, err = s.Identity(ctx)
	require.NoError(t, err)
	out.Identity.ClusterID = "" // random per store
	return out
}

// crowded returns n resource IDs in the first buckets buckets
// (synchash.Bucket), sorted.
func crowded(buckets, n int) []string {
	var out []string
	for i := 0; len(out) < n; i++ {
		if id := fmt.Sprintf("sha256:crowd%07d", i); synchash.Bucket(id) < buckets {
			out = append(out, id)
		}
	}
	return out
}

// TestGroupsOnEtcd: the coordinator's big batches on the etcd store at
// etcd's default limit of 128 writes per transaction (docs/design.md
// §7.1): an adoption of 300 members, a node's first sync of 1,000
// references (from a new generation: additions), its full sync that
// replaces half of them, its sync by hash of changed buckets, another
// node's full sync of 100 references in each of two buckets (more than a
// group holds), and forgetting that node and one of 1,000 references all
// succeed and leave the store as the same operations leave the memory
// store. Each of them fails on etcd as one group.
func TestGroupsOnEtcd(t *testing.T) {
	c := etcdtest.Start(t, etcdtest.Options{})
	cli := c.Client(t)
	sess, err := concurrency.NewSession(cli, concurrency.WithTTL(30))
	require.NoError(t, err)
	t.Cleanup(func() { sess.Close() })
	const prefix = "/groups/"
	e := concurrency.NewElection(sess, prefix+"leader/")
	require.NoError(t, e.Campaign(t.Context(), "replica-1"))
	onEtcd, err := etcdstore.OpenElection(t.Context(), cli, prefix, e, etcdstore.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { onEtcd.Close() })

	j1 := ids(1000, "a")
	j2 := append(ids(500, "b"), j1[:500]...)
	j3 := append(ids(200, "c"), j2[200:]...)
	nodes := ids(300, "member-")

	run := func(t *testing.T, s refcount.Storage) storedState {
		ctx := context.Background()
		var skew atomic.Int64 // the coordinator's clock runs ahead by it
		now := func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }
		coord, err := newCoordinator(DefaultConfig(), Options{Refs: refcount.NewManager(s)}, now)
		require.NoError(t, err)
		defer coord.Close()

		_, err = coord.Adopt(ctx, api.AdoptRequest{ClusterID: "adopted", Nodes: nodes})
		require.NoError(t, err, "adopt %d members", len(nodes))

		session(t, coord, "n1")
		syncFull(t, coord, "n1", "g1", j1) // a new generation: additions only
		require.True(t, synced(t, coord, "n1"))
		reopen(t, coord, "n1")
		syncFull(t, coord, "n1", "g1", j2) // a replace
		require.True(t, synced(t, coord, "n1"))
		reopen(t, coord, "n1")
		differ := (&hashNode{t: t, coord: coord, id: "n1", gen: "g1"}).sync("by-hash", j3...)
		require.NotEmpty(t, differ)
		require.True(t, synced(t, coord, "n1"))

		// More references in one bucket than a group holds: the
		// bucket's additions go first, as AddRefs.
		session(t, coord, "n3")
		syncFull(t, coord, "n3", "g1", j1[:1])
		reopen(t, coord, "n3")
		syncFull(t, coord, "n3", "g1", crowded(2, 200))
		require.True(t, synced(t, coord, "n3"))

		session(t, coord, "n2")
		syncFull(t, coord, "n2", "g1", j1)
		skew.Store(int64(2 * coord.cfg.SessionTTL)) // every session lapsed
		require.NoError(t, coord.Forget(ctx, "n2"))
		require.NoError(t, coord.Forget(ctx, "n3")) // more in a bucket than a group holds

		got := readState(t, s)
		var refsN1 []string
		for _, e := range got.Refs {
			require.False(t, e.Refs.Has("n2") || e.Refs.Has("n3"), "a forgotten node references %s", e.ResourceID)
			if e.Refs.Has("n1") {
				refsN1 = append(refsN1, e.ResourceID)
			}
		}
		require.Equal(t, sorted(j3), refsN1)
		require.Len(t, got.Members, len(nodes)+1)
		require.False(t, slices.ContainsFunc(got.Members, func(m refcount.Member) bool { return m.ID == "n2" || m.ID == "n3" }))
		return got
	}
	var want storedState
	t.Run("memory", func(t *testing.T) { want = run(t, refcount.NewMemoryStorage()) })
	t.Run("etcd", func(t *testing.T) {
		require.Equal(t, want, run(t, onEtcd), "the etcd store differs from the memory store")
	})
}

// TestAdoptResumedOnEtcd: TestAdoptResumedAfterFailover on the etcd store,
// whose adoption of 300 members is several transactions: stopped after
// the first, a new coordinator on the store (as a new leader) completes
// it with the same command, without --force.
func TestAdoptResumedOnEtcd(t *testing.T) {
	c := etcdtest.Start(t, etcdtest.Options{})
	cli := c.Client(t)
	sess, err := concurrency.NewSession(cli, concurrency.WithTTL(30))
	require.NoError(t, err)
	t.Cleanup(func() { sess.Close() })
	const prefix = "/adopt/"
	e := concurrency.NewElection(sess, prefix+"leader/")
	require.NoError(t, e.Campaign(t.Context(), "replica-1"))
	onEtcd, err := etcdstore.OpenElection(t.Context(), cli, prefix, e, etcdstore.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { onEtcd.Close() })

	ctx := context.Background()
	nodes := ids(300, "node-")
	w := newStopAfter(onEtcd)
	coord := coordinatorOn(t, w)
	w.n.Store(1)
	_, err = coord.Adopt(ctx, api.AdoptRequest{ClusterID: "adopted", Nodes: nodes})
	require.ErrorIs(t, err, errStopped)
	recs, err := onEtcd.ListMembers(ctx)
	require.NoError(t, err)
	require.NotEmpty(t, recs)
	require.Less(t, len(recs), len(nodes))
	coord.Close()

	w.n.Store(-1)
	coord = coordinatorOn(t, w)
	got, err := coord.Adopt(ctx, api.AdoptRequest{ClusterID: "adopted", Nodes: nodes})
	require.NoError(t, err, "the same command completes the adoption")
	require.Equal(t, "adopted", got.ClusterID)
	recs, err = onEtcd.ListMembers(ctx)
	require.NoError(t, err)
	require.Len(t, recs, len(nodes))
}
