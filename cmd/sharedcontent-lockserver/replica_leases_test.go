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

// TestPullLeaseAcrossKill: kill -9 of the leader while node-a holds a
// pull lock. The new leader refuses the same pull to node-b (a TryLock
// is locked, a Lock queues behind node-a), node-a's lease is not lost
// and its unlock(success) is accepted there, and node-b skips: the blob
// is downloaded once.
func TestPullLeaseAcrossKill(t *testing.T) {
	etcd := etcdtest.Start(t, etcdtest.Options{})
	reps := startReplicas(t, 2, etcd.Endpoints(), replicaTTL)
	a := waitLeader(t, reps)
	holder := replicaClient(t, "node-a", reps)
	other := replicaClient(t, "node-b", reps)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	pull := lockclient.LockRequest{Type: api.OperationPull, ResourceID: "blob-held"}
	held, err := holder.Lock(ctx, pull)
	require.NoError(t, err)
	require.True(t, held.Acquired, "%+v", held)

	require.NoError(t, a.cmd.Process.Signal(syscall.SIGKILL))
	b := waitLeader(t, reps, a)
	_, err = other.TryLock(ctx, pull)
	require.ErrorIs(t, err, api.ErrLocked, "the new leader (%s) grants the pull node-a still downloads", b.url)
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
	case <-held.Lease.Lost():
		t.Fatalf("node-a's lease was lost across the failover: %v", held.Lease.Err())
	default:
	}
	require.NoError(t, holder.Unlock(ctx, held.Lease, true, nil), "node-a's unlock on the new leader")
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
	etcd := etcdtest.Start(t, etcdtest.Options{})
	reps := startReplicas(t, 2, etcd.Endpoints(), replicaTTL)
	a := waitLeader(t, reps)
	holder := replicaClient(t, "node-a", reps)
	other := replicaClient(t, "node-b", reps)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	update := lockclient.LockRequest{Type: api.OperationUpdate, ResourceID: "blob-upd"}
	held, err := holder.Lock(ctx, update)
	require.NoError(t, err)
	require.True(t, held.Acquired, "%+v", held)

	require.NoError(t, a.cmd.Process.Signal(syscall.SIGTERM))
	b := waitLeader(t, reps, a)
	_, err = other.TryLock(ctx, update)
	require.ErrorIs(t, err, api.ErrLocked, "the new leader (%s) grants the update node-a holds", b.url)
	require.NoError(t, holder.Unlock(ctx, held.Lease, true, nil), "node-a's unlock on the new leader")
	next, err := other.TryLock(ctx, update)
	require.NoError(t, err)
	require.True(t, next.Acquired)
	require.NoError(t, other.Unlock(ctx, next.Lease, true, nil))
}
