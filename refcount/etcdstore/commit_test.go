package etcdstore_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/containerd/errdefs"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/sharedcontent/sharedcontent/internal/testutil/etcdtest"
	"github.com/sharedcontent/sharedcontent/refcount"
	"github.com/sharedcontent/sharedcontent/refcount/etcdstore"
)

// ids lists the resource IDs of every reference set of s.
func ids(t *testing.T, s refcount.Storage) []string {
	t.Helper()
	page, err := s.List(t.Context(), "", 10000)
	require.NoError(t, err)
	var out []string
	for _, e := range page {
		out = append(out, e.ResourceID)
	}
	return out
}

// TestCommits runs the etcd-specific cases that share one healthy cluster.
func TestCommits(t *testing.T) {
	c := etcdtest.Start(t, etcdtest.Options{})
	cli := c.Client(t)
	l := newLeaders(cli)
	prefix := func(t *testing.T) string { return fmt.Sprintf("/test/%s/%d/", t.Name(), l.seq.Add(1)) }

	// The leader's session ends (its lease revoked, so its election key is
	// deleted): its Commits fail fenced and write nothing, its reads
	// still work, and a handle opened with the old fence is refused.
	t.Run("SessionRevoked", func(t *testing.T) {
		p := prefix(t)
		s := l.campaign(t, p, etcdstore.Options{})
		require.NoError(t, s.Commit(t.Context(), new(refcount.Batch).AddRef("r1", "a")))
		w := l.wins[s]
		require.NoError(t, w.sess.Close(), "revoke the leader's lease")
		err := s.Commit(t.Context(), new(refcount.Batch).AddRef("r2", "a").PutString("k", "v"))
		require.ErrorIs(t, err, refcount.ErrFenced)
		require.True(t, errdefs.IsFailedPrecondition(err))
		require.ErrorContains(t, err, "create revision 0", "the error says the key is gone")
		require.Equal(t, []string{"r1"}, ids(t, s), "a fenced commit wrote")
		v, err := s.GetString(t.Context(), "k")
		require.NoError(t, err)
		require.Empty(t, v)
		_, err = etcdstore.Open(t.Context(), cli, etcdstore.Options{Prefix: p, LeaderKey: w.elect.Key(), OwnerFence: int64(s.OwnerFence())})
		require.ErrorIs(t, err, refcount.ErrFenced)
	})

	// A newer leader's key: the older handle's commits fail even though
	// its own key was never deleted by a resign (it is another key).
	t.Run("NewerLeader", func(t *testing.T) {
		p := prefix(t)
		s1 := l.campaign(t, p, etcdstore.Options{})
		// The next leader wins once s1's session ends.
		require.NoError(t, l.wins[s1].sess.Close())
		s2 := l.campaign(t, p, etcdstore.Options{})
		require.Greater(t, s2.OwnerFence(), s1.OwnerFence())
		require.ErrorIs(t, s1.Commit(t.Context(), new(refcount.Batch).AddRef("r1", "a")), refcount.ErrFenced)
		require.NoError(t, s2.Commit(t.Context(), new(refcount.Batch).AddRef("r1", "b")))
		rc, err := s1.Get(t.Context(), "r1")
		require.NoError(t, err)
		require.Equal(t, []string{"b"}, rc.NodeList())
	})

	// A batch larger than one transaction is committed one transaction
	// after the other, in order, each holding whole groups: every key of a
	// group has the same mod revision, and the revisions rise group by
	// group. Small groups share a transaction.
	t.Run("SplitAtBreaks", func(t *testing.T) {
		p := prefix(t)
		s := l.campaign(t, p, etcdstore.Options{MaxTxnOps: 8})
		b := new(refcount.Batch)
		for g := range 5 {
			for n := range 3 { // 3 references, 6 writes: one group per transaction
				b.AddRef(fmt.Sprintf("g%d", g), fmt.Sprintf("n%d", n))
			}
			b.Break()
		}
		for g := 5; g < 9; g++ { // 1 reference, 2 writes: 4 groups in one
			b.AddRef(fmt.Sprintf("g%d", g), "n0").Break()
		}
		require.NoError(t, s.Commit(t.Context(), b))
		revs := map[string][]int64{}
		resp, err := cli.Get(t.Context(), p+"refs/", clientv3.WithPrefix())
		require.NoError(t, err)
		for _, kv := range resp.Kvs {
			id := string(kv.Key[len(p+"refs/") : len(p+"refs/")+2])
			revs[id] = append(revs[id], kv.ModRevision)
		}
		require.Len(t, revs, 9)
		// g0 … g3 alone (6 writes each), g4 with g5 (8), g6 … g8 (6).
		txns := map[int64]int{} // revision → writes
		var last int64
		for g := range 9 {
			r := revs[fmt.Sprintf("g%d", g)]
			for _, rev := range r {
				require.Equal(t, r[0], rev, "a group is one transaction")
			}
			require.GreaterOrEqual(t, r[0], last, "groups commit in order")
			last = r[0]
			txns[r[0]] += 2 * len(r)
		}
		require.Len(t, txns, 6)
		for rev, n := range txns {
			require.LessOrEqual(t, n, 8, "transaction at revision %d", rev)
		}
		require.Equal(t, 8, txns[revs["g4"][0]], "small groups share a transaction")
		require.Equal(t, revs["g4"][0], revs["g5"][0])
		require.Equal(t, revs["g6"][0], revs["g8"][0])
		// A batch that adds nothing new writes nothing, and still checks
		// the guard.
		before := resp.Header.Revision
		require.NoError(t, s.Commit(t.Context(), new(refcount.Batch).ReplaceNode("n1", map[string]struct{}{"g0": {}, "g1": {}, "g2": {}, "g3": {}, "g4": {}})))
		resp, err = cli.Get(t.Context(), p+"refs/", clientv3.WithPrefix(), clientv3.WithCountOnly())
		require.NoError(t, err)
		require.Equal(t, before, resp.Header.Revision, "a replace that changes nothing wrote")
	})

	// A group that does not fit one transaction fails the Commit with
	// ErrResourceExhausted before anything is written, the groups before
	// it included. 64 references (128 writes) are the most one group holds
	// against etcd's default --max-txn-ops.
	t.Run("GroupTooLarge", func(t *testing.T) {
		s := l.campaign(t, prefix(t), etcdstore.Options{})
		group := func(b *refcount.Batch, id string, n int) *refcount.Batch {
			for i := range n {
				b.AddRef(id, fmt.Sprintf("n%03d", i))
			}
			return b.Break()
		}
		err := s.Commit(t.Context(), group(group(new(refcount.Batch), "small", 1), "big", 65))
		require.ErrorIs(t, err, errdefs.ErrResourceExhausted)
		require.Empty(t, ids(t, s), "a refused batch wrote")
		require.NoError(t, s.Commit(t.Context(), group(new(refcount.Batch), "fits", 64)), "128 writes fit etcd's default")

		// A store told of a larger limit than the server's: etcd refuses
		// the transaction whole, and the error says the same.
		big := l.campaign(t, prefix(t), etcdstore.Options{MaxTxnOps: 1000})
		err = big.Commit(t.Context(), group(new(refcount.Batch), "big", 65))
		require.ErrorIs(t, err, errdefs.ErrResourceExhausted)
		require.Empty(t, ids(t, big))
	})

	t.Run("Model", func(t *testing.T) { testModel(t, l, cli) })
	t.Run("Manager", func(t *testing.T) { testManager(t, l) })

	// Sets larger than one read of List (1,000 keys): a page holds whole
	// sets, read at one revision.
	t.Run("ListLargeSets", func(t *testing.T) {
		s := l.campaign(t, prefix(t), etcdstore.Options{})
		b := new(refcount.Batch)
		for _, id := range []string{"a", "b", "c"} {
			for n := range 700 {
				b.AddRef(id, fmt.Sprintf("n%03d", n))
				if n%64 == 63 {
					b.Break()
				}
			}
			b.Break()
		}
		require.NoError(t, s.Commit(t.Context(), b))
		page, err := s.List(t.Context(), "", 2)
		require.NoError(t, err)
		require.Len(t, page, 2)
		require.Equal(t, "a", page[0].ResourceID)
		require.Equal(t, 700, page[0].Refs.Len())
		require.Equal(t, 700, page[1].Refs.Len(), "a set split across reads is whole")
		page, err = s.List(t.Context(), "b", 2)
		require.NoError(t, err)
		require.Len(t, page, 1)
		require.Equal(t, "c", page[0].ResourceID)
		require.Equal(t, 700, page[0].Refs.Len())
		has, n, err := s.RefState(t.Context(), "b", "n699")
		require.NoError(t, err)
		require.True(t, has)
		require.Equal(t, 700, n)
	})

	// The open-time checks.
	t.Run("OpenInvalid", func(t *testing.T) {
		for _, o := range []etcdstore.Options{{LeaderKey: "k", OwnerFence: 1}, {Prefix: "p", OwnerFence: 1}, {Prefix: "p", LeaderKey: "k"}} {
			_, err := etcdstore.Open(t.Context(), cli, o)
			require.ErrorIs(t, err, errdefs.ErrInvalidArgument)
		}
		s := l.campaign(t, prefix(t), etcdstore.Options{})
		err := s.Commit(t.Context(), new(refcount.Batch).AddRef("r\x00", "a"))
		require.ErrorIs(t, err, errdefs.ErrInvalidArgument, "a NUL cannot be in a key part")
	})
}

// TestMemberKilled: killing the etcd leader, one member of three, does not
// stop commits once the others have elected a new one; a restarted member
// catches up.
func TestMemberKilled(t *testing.T) {
	c := etcdtest.Start(t, etcdtest.Options{})
	l := newLeaders(c.Client(t))
	s := l.campaign(t, "/killed/", etcdstore.Options{})
	ctx := t.Context()
	require.NoError(t, s.Commit(ctx, new(refcount.Batch).AddRef("r1", "a")))
	dead := c.Leader(t)
	c.Kill(dead)
	// A write in flight to the killed leader is lost with it (etcd answers
	// "request timed out"); once another member leads, commits go on.
	c.WaitHealthy(t)
	for i := range 20 {
		require.NoError(t, s.Commit(ctx, new(refcount.Batch).AddRef(fmt.Sprintf("r%d", i+2), "a")))
	}
	require.Len(t, ids(t, s), 21)
	c.Restart(t, dead)
	c.WaitHealthy(t)
	resp, err := c.ClientOf(t, c.Endpoint(dead)).Get(ctx, "/killed/refs/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	require.NoError(t, err)
	require.EqualValues(t, 21, resp.Count, "the restarted member has every commit")
}

// TestQuorumLost: with two members of three gone, a Commit fails with a
// clear error once its context ends, and writes nothing; with the quorum
// back, commits go on without anything else done.
func TestQuorumLost(t *testing.T) {
	c := etcdtest.Start(t, etcdtest.Options{})
	l := newLeaders(c.Client(t))
	s := l.campaign(t, "/quorum/", etcdstore.Options{})
	require.NoError(t, s.Commit(t.Context(), new(refcount.Batch).AddRef("r1", "a")))
	c.Kill(1)
	c.Kill(2)
	// The survivor stops knowing a leader: from then on no write can be
	// taken into a log that a later leader would commit.
	c.WaitNoLeader(t, 0)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
	defer cancel()
	start := time.Now()
	err := s.Commit(ctx, new(refcount.Batch).AddRef("r2", "a").RemoveRef("r1", "a"))
	require.Error(t, err)
	t.Logf("commit without quorum: %v after %v", err, time.Since(start).Round(time.Millisecond))
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.ErrorContains(t, err, "etcdstore: commit")
	c.Restart(t, 1)
	c.Restart(t, 2)
	c.WaitHealthy(t)
	require.Equal(t, []string{"r1"}, ids(t, s), "the failed commit wrote")
	require.NoError(t, s.Commit(t.Context(), new(refcount.Batch).AddRef("r3", "a")))
	require.Equal(t, []string{"r1", "r3"}, ids(t, s))
}
