package etcdstore_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sharedcontent/sharedcontent/internal/testutil/etcdtest"
	"github.com/sharedcontent/sharedcontent/refcount"
	"github.com/sharedcontent/sharedcontent/refcount/etcdstore"
)

// countedAdd is one SubmitAddRef's outcome.
type countedAdd struct {
	added bool
	n     int
}

// TestSubmitAddRef: a counted add learns, in the transaction that commits
// it, whether the node was in the set and the set's size after that
// transaction (docs/design.md §7.1, "Adds that count in their
// transaction"), without a read of its own.
func TestSubmitAddRef(t *testing.T) {
	l := newLeaders(etcdtest.Start(t, etcdtest.Options{}).Client(t))
	open := l.metered
	type add struct{ res, node string }
	submit := func(s *etcdstore.Store, adds ...add) []func() (bool, int, error) {
		var waits []func() (bool, int, error)
		for _, a := range adds {
			waits = append(waits, s.SubmitAddRef(t.Context(), a.res, a.node))
		}
		return waits
	}
	outcomes := func(t *testing.T, waits []func() (bool, int, error)) []countedAdd {
		var out []countedAdd
		for _, w := range waits {
			added, n, err := w()
			require.NoError(t, err)
			out = append(out, countedAdd{added, n})
		}
		return out
	}

	// Adds pending together share one transaction with the counts of
	// their sets, read after its writes; one of a node already there is
	// written again and says so.
	t.Run("OneTxn", func(t *testing.T) {
		s, m := open(t, etcdstore.Options{FlushInterval: never})
		require.NoError(t, s.Commit(t.Context(), new(refcount.Batch).AddRef("r1", "a")))
		waits := submit(s, add{"r1", "a"}, add{"r1", "b"}, add{"r2", "a"}, add{"r1", "c"})
		require.NoError(t, s.Commit(t.Context(), new(refcount.Batch).AddRef("r3", "a")), "flushes them")
		require.Equal(t, []countedAdd{{false, 3}, {true, 3}, {true, 1}, {true, 3}}, outcomes(t, waits))
		require.Equal(t, 2.0, metric(t, m, "sharedcontent_etcd_txns_total"))
		rc, err := s.Get(t.Context(), "r1")
		require.NoError(t, err)
		require.Equal(t, []string{"a", "b", "c"}, rc.NodeList())
	})

	// A transaction leaves room for its reads: at 8 ops, 3 adds to 2
	// sets (6 writes, 2 reads) share one, and the fourth add goes to
	// the next, whose count includes it.
	t.Run("RoomForReads", func(t *testing.T) {
		s, m := open(t, etcdstore.Options{FlushInterval: never, MaxTxnOps: 8})
		waits := submit(s, add{"r1", "a"}, add{"r1", "b"}, add{"r2", "a"}, add{"r2", "b"})
		require.NoError(t, s.Close(), "flushes them")
		require.Equal(t, []countedAdd{{true, 2}, {true, 2}, {true, 1}, {true, 2}}, outcomes(t, waits))
		require.Equal(t, 2.0, metric(t, m, "sharedcontent_etcd_txns_total"))
	})

	// With no room for a read in a transaction, the add is committed
	// alone and counted by a read after it.
	t.Run("NoRoom", func(t *testing.T) {
		s, m := open(t, etcdstore.Options{FlushInterval: never, MaxTxnOps: 2})
		waits := submit(s, add{"r1", "a"}, add{"r1", "b"})
		require.NoError(t, s.Close(), "flushes them")
		require.Equal(t, []countedAdd{{true, 1}, {true, 2}}, outcomes(t, waits))
		require.Equal(t, 2.0, metric(t, m, "sharedcontent_etcd_txns_total"))
	})

	// Group commit off: each add is its own transaction, counted in it.
	t.Run("Off", func(t *testing.T) {
		s, m := open(t, etcdstore.Options{FlushInterval: -1})
		require.Equal(t, []countedAdd{{true, 1}, {true, 2}, {false, 2}},
			outcomes(t, submit(s, add{"r1", "a"}, add{"r1", "b"}, add{"r1", "b"})))
		require.Equal(t, 3.0, metric(t, m, "sharedcontent_etcd_txns_total"))
	})

	// A later batch of the same transaction that drops the reference
	// again: the add is taken as added, and counted after both.
	t.Run("DroppedInTheSameTxn", func(t *testing.T) {
		s, _ := open(t, etcdstore.Options{FlushInterval: never})
		waits := submit(s, add{"r1", "a"}, add{"r1", "b"})
		require.NoError(t, s.Commit(t.Context(), new(refcount.Batch).RemoveRef("r1", "a")))
		require.Equal(t, []countedAdd{{true, 1}, {true, 1}}, outcomes(t, waits))
	})

	// The guard fails: the adds fail fenced and write nothing.
	t.Run("Fenced", func(t *testing.T) {
		s, _ := open(t, etcdstore.Options{FlushInterval: never})
		waits := submit(s, add{"r1", "a"}, add{"r2", "a"})
		require.NoError(t, l.wins[s].sess.Close(), "revoke the leader's lease")
		require.ErrorIs(t, s.Commit(t.Context(), new(refcount.Batch).AddRef("r3", "a")), refcount.ErrFenced)
		for _, w := range waits {
			_, _, err := w()
			require.ErrorIs(t, err, refcount.ErrFenced)
		}
		require.Empty(t, ids(t, s))
		_, _, err := s.SubmitAddRef(t.Context(), "r1", "b")()
		require.ErrorIs(t, err, refcount.ErrFenced)
	})

	// Bad IDs are refused before anything is queued.
	t.Run("BadID", func(t *testing.T) {
		s, m := open(t, etcdstore.Options{})
		_, _, err := s.SubmitAddRef(t.Context(), "r\x00", "a")()
		require.Error(t, err)
		_, _, err = s.SubmitAddRef(t.Context(), "r1", "")()
		require.Error(t, err)
		require.Zero(t, metric(t, m, "sharedcontent_etcd_txns_total"))
	})

	// The Manager's hot path: a node's hash is no longer offered once an
	// add put it in a set, but still is after an add of a reference it
	// had (nothing changed).
	t.Run("ManagerHashes", func(t *testing.T) {
		s, _ := open(t, etcdstore.Options{})
		mgr := refcount.NewManager(s)
		ctx := context.Background()
		require.NoError(t, mgr.Commit(ctx, new(refcount.Batch).AddRef("r1", "a")))
		require.NoError(t, mgr.BuildHashes(ctx))
		n, err := mgr.AddRefOrdered(ctx, "r1", "a")()
		require.NoError(t, err)
		require.Equal(t, 1, n)
		_, ok := mgr.NodeHash("a")
		require.True(t, ok, "an add that changed nothing made the hash unusable")
		n, err = mgr.AddRefOrdered(ctx, "r2", "a")()
		require.NoError(t, err)
		require.Equal(t, 1, n)
		_, ok = mgr.NodeHash("a")
		require.False(t, ok, "the hash misses the new reference but is offered")
	})
}
