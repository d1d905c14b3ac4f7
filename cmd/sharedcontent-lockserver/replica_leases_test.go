package main

import (
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sharedcontent/sharedcontent/internal/testutil/etcdtest"
	"github.com/sharedcontent/sharedcontent/lockclient"
	"github.com/sharedcontent/sharedcontent/lockserver/api"
)

// Leases survive a failover (docs/design.md §3.7, §7.2): a pull's lease
// is recorded in etcd when it is granted, an update's when the leader
// resigns, and the next leader adopts them.

// heldAcross is a lock held by node-a across a failover.
type heldAcross struct {
	ctx           context.Context
	next          *replicaProc // the new leader
	holder, other *lockclient.Client
	held          *lockclient.LockResult // node-a's
}

// holdAcross starts two replicas on a real 3-member etcd, has node-a take
// req, signals the leader with sig, and returns once the other replica
// leads.
func holdAcross(t *testing.T, req api.LockRequest, sig syscall.Signal) heldAcross {
	t.Helper()
	etcd := etcdtest.Start(t, etcdtest.Options{})
	reps := startReplicas(t, 2, etcd.Endpoints(), replicaTTL)
	a := waitLeader(t, reps)
	h := heldAcross{holder: replicaClient(t, "node-a", reps), other: replicaClient(t, "node-b", reps)}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	h.ctx = ctx
	// node-a is a member with a live session, as a node's daemon is: the
	// coordinator records a use only for such a node (docs/design.md §8.4).
	_, err := h.holder.Session(ctx, api.SessionRequest{NodeID: "node-a"})
	require.NoError(t, err)
	h.held, err = h.holder.Lock(ctx, req)
	require.NoError(t, err)
	require.True(t, h.held.Acquired, "%+v", h.held)
	require.NoError(t, a.cmd.Process.Signal(sig))
	h.next = waitLeader(t, reps, a)
	return h
}

// TestPullLeaseAcrossKill: kill -9 of the leader while node-a holds a
// pull lock. The new leader refuses the same pull to node-b (a TryLock
// is locked, a Lock queues behind node-a), node-a's lease is not lost
// and its unlock(success) is accepted there, and node-b skips: the blob
// is downloaded once.
func TestPullLeaseAcrossKill(t *testing.T) {
	pull := api.LockRequest{Type: api.OperationPull, ResourceID: "blob-held"}
	h := holdAcross(t, pull, syscall.SIGKILL)
	ctx, other := h.ctx, h.other
	_, err := other.TryLock(ctx, pull)
	require.ErrorIs(t, err, api.ErrLocked, "the new leader (%s) grants the pull node-a still downloads", h.next.url)
	queued := make(chan *lockclient.LockResult, 1)
	go func() {
		res, err := other.Lock(ctx, pull)
		if err != nil {
			res = &lockclient.LockResult{Error: err}
		}
		queued <- res
	}()
	require.Eventually(t, func() bool {
		st, err := other.Status(ctx, api.OperationPull, "blob-held")
		return err == nil && st.QueueLength == 1 && st.Holder != nil && st.Holder.NodeID == "node-a"
	}, time.Minute, 20*time.Millisecond, "node-b queues behind node-a on the new leader")

	select {
	case <-h.held.Lease.Lost():
		t.Fatalf("node-a's lease was lost across the failover: %v", h.held.Lease.Err())
	default:
	}
	// A new leader holds no live session until each node renews (§8.4);
	// node-a's daemon renews on its own schedule, or at once when its
	// unlock is refused no_session.
	_, err = h.holder.Session(ctx, api.SessionRequest{NodeID: "node-a"})
	require.NoError(t, err, "node-a renews its session on the new leader")
	require.NoError(t, h.holder.Unlock(ctx, h.held.Lease, true, nil), "node-a's unlock on the new leader")
	res := <-queued
	require.NoError(t, res.Error)
	require.True(t, res.Skipped, "node-b skips the pull node-a completed: %+v", res)
	refs, err := other.Refs(ctx, "blob-held")
	require.NoError(t, err)
	require.Equal(t, []string{"node-a"}, refs.Nodes)
}

// TestUpdateLeaseAcrossSIGTERM: SIGTERM of the leader while node-a holds
// an update lock: the leader records the lease before it resigns, the new
// leader refuses the update to node-b and accepts node-a's unlock.
func TestUpdateLeaseAcrossSIGTERM(t *testing.T) {
	update := api.LockRequest{Type: api.OperationUpdate, ResourceID: "blob-upd"}
	h := holdAcross(t, update, syscall.SIGTERM)
	ctx, other := h.ctx, h.other
	_, err := other.TryLock(ctx, update)
	require.ErrorIs(t, err, api.ErrLocked, "the new leader (%s) grants the update node-a holds", h.next.url)
	require.NoError(t, h.holder.Unlock(ctx, h.held.Lease, true, nil), "node-a's unlock on the new leader")
	next, err := other.TryLock(ctx, update)
	require.NoError(t, err)
	require.True(t, next.Acquired)
	require.NoError(t, other.Unlock(ctx, next.Lease, true, nil))
}
