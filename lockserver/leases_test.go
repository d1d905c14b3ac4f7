package lockserver

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sharedcontent/sharedcontent/lockserver/api"
	"github.com/sharedcontent/sharedcontent/refcount"
)

// Leases survive a failover (docs/design.md §3.7, §7.2): a Coordinator
// that starts on a store adopts the pull leases its predecessor granted,
// and the update leases it held when it closed. Each test runs on the
// memory and the bbolt store; the successor starts on a handle that takes
// the state over (refcount.LocalStorage.TakeOver), as a new leader does,
// while its predecessor is still running (a kill -9 leaves it so) or after
// it closed (a graceful hand-over).

// leaseStores are the stores the tests run on.
var leaseStores = map[string]func(t *testing.T) refcount.LocalStorage{
	"memory": func(*testing.T) refcount.LocalStorage { return refcount.NewMemoryStorage() },
	"bbolt": func(t *testing.T) refcount.LocalStorage {
		s, err := refcount.OpenBoltStorage(filepath.Join(t.TempDir(), "refs.db"))
		require.NoError(t, err)
		t.Cleanup(func() { s.Close() })
		return s
	},
}

// startOnStore starts a Coordinator on s, closed when t ends.
func startOnStore(t *testing.T, s refcount.Storage) *Coordinator {
	t.Helper()
	c, err := NewCoordinator(DefaultConfig(), Options{Refs: refcount.NewManager(s)})
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	return c
}

// successor starts a Coordinator on a handle that takes s over.
func successor(t *testing.T, s refcount.LocalStorage) *Coordinator {
	t.Helper()
	s2, err := s.TakeOver(context.Background())
	require.NoError(t, err)
	t.Cleanup(func() { s2.Close() })
	return startOnStore(t, s2)
}

func storedLeases(t *testing.T, c *Coordinator) []string {
	t.Helper()
	recs, err := c.store.state.Leases(context.Background())
	require.NoError(t, err)
	var ids []string
	for _, r := range recs {
		ids = append(ids, r.Type+":"+r.LeaseID)
	}
	return ids
}

func keepalive(c *Coordinator, typ api.OperationType, lease locked) error {
	_, err := c.Keepalive(context.Background(), api.KeepaliveRequest{Type: typ, ResourceID: blob, LeaseID: lease.LeaseID, NodeID: lease.Node})
	return err
}

// TestPullLeaseSurvivesFailover: the successor refuses the pull to
// another node (it queues), the holder's keepalive and unlock(success)
// work there, the queued node is told the pull completed, and the record
// goes with the reference.
func TestPullLeaseSurvivesFailover(t *testing.T) {
	for name, open := range leaseStores {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			s := open(t)
			l1 := startOnStore(t, s)
			p := mustLock(t, l1, api.OperationPull, "n1")
			require.True(t, p.Acquired)
			require.Equal(t, []string{"pull:" + p.LeaseID}, storedLeases(t, l1), "the grant is recorded before it is answered")

			l2 := successor(t, s) // l1 is left running, as a kill -9 leaves it
			w := mustLock(t, l2, api.OperationPull, "n2")
			require.True(t, w.Queued, "the successor must not grant the pull the holder still downloads")
			sw, err := l2.Subscribe(api.OperationPull, blob, w.Node, w.RequestID)
			require.NoError(t, err)
			t.Cleanup(sw.Close)
			again, err := l2.Lock(ctx, api.LockRequest{Type: api.OperationPull, ResourceID: blob, NodeID: p.Node, RequestID: p.RequestID})
			require.NoError(t, err)
			require.True(t, again.Acquired, "the holder's retried lock gets its lease back")
			require.Equal(t, p.LeaseID, again.LeaseID)
			require.Equal(t, p.Fence, again.Fence)

			require.NoError(t, keepalive(l2, api.OperationPull, p), "the holder's keepalive")
			members(t, l2, "n1") // the holder's session at the successor
			unlock(t, l2, api.OperationPull, p.LeaseID, true)
			require.Equal(t, api.EventCompleted, receive(t, sw.Events()).Name, "the queued node skips")
			require.Equal(t, []string{"n1"}, refsOf(t, l2, blob))
			require.Empty(t, storedLeases(t, l2), "the record went with the reference")

			u := mustLock(t, l2, api.OperationUpdate, "n3")
			require.Greater(t, u.Fence, p.Fence, "the successor's fences are above the adopted one")
		})
	}
}

// TestAdoptedLeaseExpires: an adopted lease nobody renews expires after a
// lease TTL; its record is dropped and the waiter is granted (its own
// lease recorded).
func TestAdoptedLeaseExpires(t *testing.T) {
	for name, open := range leaseStores {
		t.Run(name, func(t *testing.T) {
			s := open(t)
			l1 := startOnStore(t, s)
			p := mustLock(t, l1, api.OperationPull, "n1")
			require.True(t, p.Acquired)
			l2 := successor(t, s)
			w := mustLock(t, l2, api.OperationPull, "n2")
			require.True(t, w.Queued)
			sw, err := l2.Subscribe(api.OperationPull, blob, w.Node, w.RequestID)
			require.NoError(t, err)
			t.Cleanup(sw.Close)

			l2.sweepOf(blob, time.Now().Add(l2.cfg.LeaseTTL-time.Second))
			require.Empty(t, sw.Events(), "held for a lease TTL from the successor's start")
			l2.sweepOf(blob, time.Now().Add(l2.cfg.LeaseTTL+time.Second))
			ev := receive(t, sw.Events())
			require.Equal(t, api.EventGranted, ev.Name)
			require.NotNil(t, ev.Lease)
			require.Equal(t, []string{"pull:" + ev.Lease.LeaseID}, storedLeases(t, l2), "the adopted record is dropped, the new grant's written")
			require.ErrorIs(t, keepalive(l2, api.OperationPull, p), api.ErrNotHolder)

			_, err = l2.Unlock(context.Background(), api.UnlockRequest{Type: api.OperationPull, ResourceID: blob, LeaseID: ev.Lease.LeaseID, NodeID: "n2"})
			require.NoError(t, err)
			require.Empty(t, storedLeases(t, l2), "a failed pull drops its record")
		})
	}
}

// TestUpdateLeaseHandedOver: a Coordinator that closes records the update
// leases held; its successor adopts them (the holder's unlock works, a
// waiter queues behind and is granted after) and drops the record once
// released. An unlock that reaches a closing Coordinator is refused, so
// that the record is not of a lease already released.
func TestUpdateLeaseHandedOver(t *testing.T) {
	for name, open := range leaseStores {
		t.Run(name, func(t *testing.T) {
			s := open(t)
			l1 := startOnStore(t, s)
			u := mustLock(t, l1, api.OperationUpdate, "n1")
			require.True(t, u.Acquired)
			require.Empty(t, storedLeases(t, l1), "an update's grant writes nothing")
			require.NoError(t, l1.Close())
			_, err := l1.Unlock(context.Background(), api.UnlockRequest{Type: api.OperationUpdate, ResourceID: blob, LeaseID: u.LeaseID, Success: true})
			require.ErrorIs(t, err, api.ErrUnavailable, "a closed coordinator releases nothing")

			l2 := successor(t, s)
			require.Equal(t, []string{"update:" + u.LeaseID}, storedLeases(t, l2))
			w := mustLock(t, l2, api.OperationUpdate, "n2")
			require.True(t, w.Queued, "the successor must not grant the update held")
			sw, err := l2.Subscribe(api.OperationUpdate, blob, w.Node, w.RequestID)
			require.NoError(t, err)
			t.Cleanup(sw.Close)
			require.NoError(t, keepalive(l2, api.OperationUpdate, u))
			unlock(t, l2, api.OperationUpdate, u.LeaseID, true)
			require.Equal(t, api.EventGranted, receive(t, sw.Events()).Name)
			require.Empty(t, storedLeases(t, l2), "the adopted record is dropped once released")
		})
	}
}

// TestExpiredPullLeaseKeepsHolderRef (docs/design.md §8.17): a pull
// lease that ends without its holder's unlock, at the coordinator that
// granted it or at one that adopted it, leaves the reference of its
// holder (live then: TestNoReferenceWithoutSession has one that is not),
// in the batch that drops its record: the holder may have committed the blob
// under the lease while its reference add and its unlock met a failover.
// A delete by another node is then refused in_use, as after the unlock
// the holder could not send.
func TestExpiredPullLeaseKeepsHolderRef(t *testing.T) {
	for name, open := range leaseStores {
		for _, failover := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/failover=%v", name, failover), func(t *testing.T) {
				ctx := context.Background()
				s := open(t)
				c := startOnStore(t, s)
				syncedNode(t, c, "n1") // a member: its reference counts
				p := mustLock(t, c, api.OperationPull, "n1")
				require.True(t, p.Acquired)
				if failover {
					c = successor(t, s)
					syncedNode(t, c, "n1")
				}
				d := mustLock(t, c, api.OperationDelete, "n2")
				require.True(t, d.Queued, "no delete while the pull lease lives: %+v", d)
				sd, err := c.Subscribe(api.OperationDelete, blob, d.Node, d.RequestID)
				require.NoError(t, err)
				t.Cleanup(sd.Close)

				// The lease ends; its holder, alive and connected, holds a
				// live session then (the reference rule, §8.4).
				clock := useFakeClock(c)
				clock.at(c.cfg.LeaseTTL + time.Second)
				_, err = c.Session(ctx, sessionReq("n1", nil))
				require.NoError(t, err)
				c.sweepOf(blob, c.now())
				require.Equal(t, api.EventError, receive(t, sd.Events()).Name, "the queued delete is refused at the lease's end")
				require.ErrorIs(t, keepalive(c, api.OperationPull, p), api.ErrNotHolder, "expired")
				require.Equal(t, []string{"n1"}, refsOf(t, c, blob), "the holder's reference stays")
				require.Empty(t, storedLeases(t, c), "the record went with the reference")
				_, err = c.Lock(ctx, lockReq(api.OperationDelete, "n3"))
				require.ErrorIs(t, err, api.ErrInUse, "another node's delete must not remove what the holder may have committed")
			})
		}
	}
}

// TestExpiredPullLeaseOfForgottenHolder: a node forgotten while it held a
// pull lease gets no reference when the lease expires (docs/design.md
// §8.4: no reference for a node that is not a member); the lease record
// goes, and the blob is free for a delete.
//
// Before: the expired lease added the forgotten node's reference, which
// nothing could drop (no sync of a non-member replaces it; expiry and
// forget need a member), so the blob was never deleted.
func TestExpiredPullLeaseOfForgottenHolder(t *testing.T) {
	for name, open := range leaseStores {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			c := startOnStore(t, open(t))
			clock := useFakeClock(c)
			_, err := c.Session(ctx, sessionReq("n1", nil))
			require.NoError(t, err)
			p := mustLock(t, c, api.OperationPull, "n1")
			require.True(t, p.Acquired)
			clock.at(c.cfg.SessionTTL + time.Second) // n1's session lapsed
			require.NoError(t, c.Forget(ctx, "n1"), "an operator forgets n1 while its pull lease lives")

			c.sweepOf(blob, c.now().Add(c.cfg.LeaseTTL+time.Second))
			require.ErrorIs(t, keepalive(c, api.OperationPull, p), api.ErrNotHolder, "expired")
			require.Empty(t, refsOf(t, c, blob), "no reference for a node that is no member")
			require.Empty(t, storedLeases(t, c), "the lease record went")
			syncedNode(t, c, "n2")
			d, err := c.Lock(ctx, lockReq(api.OperationDelete, "n2"))
			require.NoError(t, err)
			require.True(t, d.Acquired, "the blob is free for a delete")
		})
	}
}
