package etcdstore_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containerd/errdefs"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/sharedcontent/sharedcontent/internal/testutil/etcdtest"
	"github.com/sharedcontent/sharedcontent/refcount"
	"github.com/sharedcontent/sharedcontent/refcount/etcdstore"
)

// never is a flush interval no test reaches: batches stay pending until
// a Commit, a full transaction or Close flushes them.
const never = time.Hour

// metric sums the samples of the counter or histogram (its count) name
// whose labels include the given name=value pairs, as m collects them.
func metric(t testing.TB, m *etcdstore.Metrics, name string, labels ...string) float64 {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	require.NoError(t, reg.Register(m))
	families, err := reg.Gather()
	require.NoError(t, err)
	sum := 0.0
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	samples:
		for _, s := range f.GetMetric() {
			for i := 0; i+1 < len(labels); i += 2 {
				found := false
				for _, l := range s.GetLabel() {
					found = found || (l.GetName() == labels[i] && l.GetValue() == labels[i+1])
				}
				if !found {
					continue samples
				}
			}
			if h := s.GetHistogram(); h != nil {
				sum += float64(h.GetSampleCount())
			} else {
				sum += s.GetCounter().GetValue()
			}
		}
	}
	return sum
}

// metered wins the election of a state of the test's own, with metrics
// of its own (campaign).
func (l *leaders) metered(t *testing.T, opts etcdstore.Options) (*etcdstore.Store, *etcdstore.Metrics) {
	opts.Metrics = etcdstore.NewMetrics()
	return l.campaign(t, fmt.Sprintf("/test/%s/%d/", t.Name(), l.seq.Add(1)), opts), opts.Metrics
}

// TestGroupCommit runs the cases of Submit's group commit on one healthy
// cluster.
func TestGroupCommit(t *testing.T) {
	c := etcdtest.Start(t, etcdtest.Options{})
	cli := c.Client(t)
	l := newLeaders(cli)
	open := l.metered

	// A rollout's shape: 200 nodes add a reference each to one of 5
	// blobs through the Manager's hot path at once. Their batches share
	// transactions, and every reference is there afterwards.
	t.Run("Coalesce", func(t *testing.T) {
		s, m := open(t, etcdstore.Options{})
		mgr := refcount.NewManager(s)
		const nodes, blobs = 200, 5
		var wg sync.WaitGroup
		for i := range nodes {
			wg.Go(func() {
				n, err := mgr.AddRefOrdered(t.Context(), fmt.Sprintf("blob%d", i%blobs), fmt.Sprintf("n%03d", i))()
				if err != nil {
					t.Error(err)
				} else if n < 1 {
					t.Errorf("node %d: count %d after its add", i, n)
				}
			})
		}
		wg.Wait()
		for b := range blobs {
			rc, err := s.Get(t.Context(), fmt.Sprintf("blob%d", b))
			require.NoError(t, err)
			require.Equal(t, nodes/blobs, rc.Len())
		}
		txns := metric(t, m, "sharedcontent_etcd_txns_total")
		t.Logf("%d batches in %.0f transactions (%.1f batches each)", nodes, txns, nodes/txns)
		require.LessOrEqual(t, txns, float64(nodes/4), "the batches did not share transactions")
		require.Zero(t, metric(t, m, "sharedcontent_etcd_txns_failed_total"))
	})

	// The interval alone flushes one small batch: nothing else is
	// submitted, and its wait returns with the batch committed.
	t.Run("Timer", func(t *testing.T) {
		s, m := open(t, etcdstore.Options{})
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		require.NoError(t, s.Submit(ctx, new(refcount.Batch).AddRef("r1", "a"))())
		has, n, err := s.RefState(ctx, "r1", "a")
		require.NoError(t, err)
		require.True(t, has)
		require.Equal(t, 1, n)
		require.Equal(t, 1.0, metric(t, m, "sharedcontent_etcd_txns_total"))
	})

	// Pending batches that write the same keys share one transaction
	// (etcd refuses a key written twice in one): each key is written
	// once, with the last value in submission order. A Commit flushes at
	// once, without waiting for the interval.
	t.Run("Fold", func(t *testing.T) {
		s, m := open(t, etcdstore.Options{FlushInterval: never})
		ctx := t.Context()
		waits := []func() error{
			s.Submit(ctx, new(refcount.Batch).PutString("k", "1").AddRef("r1", "a")),
			s.Submit(ctx, new(refcount.Batch).PutString("k", "2").AddRef("r2", "a")),
			s.Submit(ctx, new(refcount.Batch).RemoveRef("r1", "a").AddRef("r2", "b")),
		}
		require.NoError(t, s.Commit(ctx, new(refcount.Batch).AddRef("r1", "c")))
		for _, w := range waits {
			require.NoError(t, w())
		}
		require.Equal(t, 1.0, metric(t, m, "sharedcontent_etcd_txns_total"), "one transaction for all four")
		v, err := s.GetString(ctx, "k")
		require.NoError(t, err)
		require.Equal(t, "2", v)
		rc, err := s.Get(ctx, "r1")
		require.NoError(t, err)
		require.Equal(t, []string{"c"}, rc.NodeList())
		rc, err = s.Get(ctx, "r2")
		require.NoError(t, err)
		require.Equal(t, []string{"a", "b"}, rc.NodeList())
	})

	// The leader's session ends while batches are pending: their
	// transaction fails its guard, every one of them fails fenced, none
	// is visible, and a later Submit fails at once without a transaction.
	t.Run("FenceLost", func(t *testing.T) {
		s, m := open(t, etcdstore.Options{FlushInterval: never})
		ctx := t.Context()
		var waits []func() error
		for i := range 10 {
			waits = append(waits, s.Submit(ctx, new(refcount.Batch).AddRef(fmt.Sprintf("r%d", i), "a").PutUint64(fmt.Sprintf("k%d", i), 1)))
		}
		require.NoError(t, l.wins[s].sess.Close(), "revoke the leader's lease")
		err := s.Commit(ctx, new(refcount.Batch).AddRef("last", "a"))
		require.ErrorIs(t, err, refcount.ErrFenced)
		for i, w := range waits {
			err := w()
			require.ErrorIs(t, err, refcount.ErrFenced, "batch %d", i)
			require.True(t, errdefs.IsFailedPrecondition(err))
		}
		require.Empty(t, ids(t, s), "a fenced batch is visible")
		v, err := s.GetUint64(ctx, "k0")
		require.NoError(t, err)
		require.Zero(t, v)
		require.Equal(t, 1.0, metric(t, m, "sharedcontent_etcd_txns_total"), "the pending batches shared one transaction")
		require.Equal(t, 1.0, metric(t, m, "sharedcontent_etcd_txns_failed_total", "reason", "fenced"))
		require.ErrorIs(t, s.Submit(ctx, new(refcount.Batch).AddRef("r1", "b"))(), refcount.ErrFenced)
		require.Equal(t, 1.0, metric(t, m, "sharedcontent_etcd_txns_total"), "a fenced handle sent another transaction")
	})

	// A batch larger than one transaction is committed alone, split at
	// its Breaks as Commit splits it, between the batches before and
	// after it; one whose group alone is too large fails alone; the
	// others commit.
	t.Run("LargeBatchAlone", func(t *testing.T) {
		s, m := open(t, etcdstore.Options{FlushInterval: never, MaxTxnOps: 8})
		ctx := t.Context()
		large := new(refcount.Batch)
		for g := range 3 { // 3 groups of 4 writes
			large.AddRef(fmt.Sprintf("L%d", g), "a").AddRef(fmt.Sprintf("L%d", g), "b").Break()
		}
		tooLarge := new(refcount.Batch)
		for i := range 5 { // one group of 10 writes
			tooLarge.AddRef("T", fmt.Sprintf("n%d", i))
		}
		waits := []func() error{
			s.Submit(ctx, new(refcount.Batch).AddRef("s1", "a")),
			s.Submit(ctx, new(refcount.Batch).AddRef("s2", "a")),
			s.Submit(ctx, large),
			s.Submit(ctx, tooLarge),
		}
		require.NoError(t, s.Commit(ctx, new(refcount.Batch).AddRef("s3", "a")))
		require.NoError(t, waits[0]())
		require.NoError(t, waits[1]())
		require.NoError(t, waits[2]())
		require.ErrorIs(t, waits[3](), errdefs.ErrResourceExhausted)
		require.Equal(t, []string{"L0", "L1", "L2", "s1", "s2", "s3"}, ids(t, s))
		// s1+s2, large in two (8 writes, then 4), s3: the mod revisions
		// of their keys say which Txn wrote them.
		require.Equal(t, 4.0, metric(t, m, "sharedcontent_etcd_txns_total"))
		rev := func(res, node string) int64 {
			resp, err := cli.Get(ctx, l.wins[s].prefix+"refs/"+res+"\x00"+node)
			require.NoError(t, err)
			require.Len(t, resp.Kvs, 1)
			return resp.Kvs[0].ModRevision
		}
		require.Equal(t, rev("s1", "a"), rev("s2", "a"), "s1 and s2 share a Txn")
		require.Less(t, rev("s2", "a"), rev("L0", "a"))
		require.Equal(t, rev("L0", "a"), rev("L1", "b"), "the large batch's first two groups share a Txn")
		require.Less(t, rev("L1", "b"), rev("L2", "a"))
		require.Equal(t, rev("L2", "a"), rev("L2", "b"))
		require.Less(t, rev("L2", "b"), rev("s3", "a"))
	})

	// Pending batches that fill a transaction are flushed without
	// waiting for the interval: at MaxTxnOps writes, and near
	// MaxTxnBytes (the batch that would overflow it waits for the next).
	t.Run("FullTxn", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		s, m := open(t, etcdstore.Options{FlushInterval: never, MaxTxnOps: 8})
		var waits []func() error
		for i := range 4 { // 2 writes each
			waits = append(waits, s.Submit(ctx, new(refcount.Batch).AddRef(fmt.Sprintf("r%d", i), "a")))
		}
		for _, w := range waits {
			require.NoError(t, w(), "4 references fill 8 writes")
		}
		require.Equal(t, 1.0, metric(t, m, "sharedcontent_etcd_txns_total"))

		s, m = open(t, etcdstore.Options{FlushInterval: never, MaxTxnBytes: 1000})
		big := strings.Repeat("x", 450)
		w1 := s.Submit(ctx, new(refcount.Batch).PutString("k1", big))
		w2 := s.Submit(ctx, new(refcount.Batch).PutString("k2", big))
		require.NoError(t, w1(), "two values of 450 bytes fill about 1000")
		require.Equal(t, 1.0, metric(t, m, "sharedcontent_etcd_txns_total"))
		require.NoError(t, s.Commit(ctx, new(refcount.Batch).PutString("k3", "v")))
		require.NoError(t, w2())
		require.Equal(t, 2.0, metric(t, m, "sharedcontent_etcd_txns_total"), "the second value shares the Commit's Txn")
		require.Equal(t, 2.0, metric(t, m, "sharedcontent_etcd_txn_ops"), "one ops observation per Txn")
		require.Equal(t, 2.0, metric(t, m, "sharedcontent_etcd_txn_seconds", "outcome", "ok"))
	})

	// Random batches of reference writes, submitted some at a time and
	// flushed together, leave the store as they leave the memory store
	// one Commit after the other (the folding across batches, and the
	// re-planning when one does not fit, change nothing), and no batch
	// is split: one too large alone fails alone.
	t.Run("Model", func(t *testing.T) {
		rng := rand.New(rand.NewPCG(3, 4))
		s, m := open(t, etcdstore.Options{FlushInterval: never, MaxTxnOps: 16})
		mem := refcount.NewMemoryStorage()
		gen := randomBatches(rng)
		ctx := t.Context()
		committed, submitted := 0, 0
		for round := range 40 {
			var (
				batches []*refcount.Batch
				waits   []func() error
			)
			for range 1 + rng.IntN(10) {
				b := gen()
				batches = append(batches, b)
				waits = append(waits, s.Submit(ctx, b))
			}
			require.NoError(t, s.Commit(ctx, new(refcount.Batch).PutUint64("round", uint64(round))))
			for i, w := range waits {
				err := w()
				if errors.Is(err, errdefs.ErrResourceExhausted) {
					continue // a group over 16 writes: nothing written
				}
				require.NoError(t, err)
				require.NoError(t, mem.Commit(ctx, batches[i]))
				committed++
			}
			submitted += len(batches)
			want, err := mem.List(ctx, "", 1000)
			require.NoError(t, err)
			got, err := s.List(ctx, "", 1000)
			require.NoError(t, err)
			require.Equal(t, entries(want), entries(got), "after round %d", round)
		}
		txns := metric(t, m, "sharedcontent_etcd_txns_total")
		t.Logf("%d batches submitted, %d committed, in %.0f transactions (with a Commit per round)", submitted, committed, txns)
		require.Greater(t, committed, 50, "too few batches fit")
	})

	// A batch whose waiter left (its context ended) before its flush is
	// abandoned: no Txn is sent, and it writes nothing.
	t.Run("Abandoned", func(t *testing.T) {
		s, m := open(t, etcdstore.Options{FlushInterval: never})
		ctx, cancel := context.WithCancel(t.Context())
		w := s.Submit(ctx, new(refcount.Batch).AddRef("r1", "a"))
		cancel()
		require.ErrorIs(t, w(), context.Canceled)
		require.NoError(t, s.Close(), "flushes what is pending")
		require.Zero(t, metric(t, m, "sharedcontent_etcd_txns_total"))
		win := l.wins[s]
		r, err := etcdstore.Open(t.Context(), cli, etcdstore.Options{Prefix: win.prefix, LeaderKey: win.elect.Key(), OwnerFence: int64(s.OwnerFence())})
		require.NoError(t, err)
		_, err = r.Get(t.Context(), "r1")
		require.ErrorIs(t, err, errdefs.ErrNotFound)
	})

	// Close commits what is pending before it returns.
	t.Run("CloseFlushes", func(t *testing.T) {
		s, _ := open(t, etcdstore.Options{FlushInterval: never})
		w := s.Submit(t.Context(), new(refcount.Batch).AddRef("r1", "a"))
		require.NoError(t, s.Close())
		require.NoError(t, w())
		win := l.wins[s]
		r, err := etcdstore.Open(t.Context(), cli, etcdstore.Options{Prefix: win.prefix, LeaderKey: win.elect.Key(), OwnerFence: int64(s.OwnerFence())})
		require.NoError(t, err)
		rc, err := r.Get(t.Context(), "r1")
		require.NoError(t, err)
		require.Equal(t, []string{"a"}, rc.NodeList())
		require.ErrorIs(t, s.Submit(t.Context(), new(refcount.Batch).AddRef("r2", "a"))(), errdefs.ErrFailedPrecondition, "closed")
	})
}
