package lockclient

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sharedcontent/sharedcontent/internal/testutil/members"
	"github.com/sharedcontent/sharedcontent/lockserver"
	"github.com/sharedcontent/sharedcontent/lockserver/api"
	"github.com/sharedcontent/sharedcontent/lockserver/httpserver"
	"github.com/sharedcontent/sharedcontent/lockserver/lockservertest"
)

// shortTTL makes leases expire fast: keepalives every 100 ms.
const shortTTL = 300 * time.Millisecond

var withShortTTL = withLeaseTTL(shortTTL)

// heldTTL is the lease TTL of tests whose lease must not lapse by timing:
// long enough that a loaded machine (race detector, parallel packages) does
// not delay a renewal past it.
const heldTTL = time.Second

// TestLeaseHeldAcrossTTLs: while the holder lives, its keepalive holds the
// lock for several TTLs; the waiter keeps waiting, and Unlock stops the
// keepalive.
func TestLeaseHeldAcrossTTLs(t *testing.T) {
	ts := lockservertest.Start(t, withLeaseTTL(heldTTL))
	ct := newCountingClient(t, ts.URL())
	holder := newHTTPClient(t, ts.URL(), "node-a", WithShortClient(ct))
	waiter := newHTTPClient(t, ts.URL(), "node-b")
	members.Open(t, ts.Core(), "node-a", "node-b")
	req := api.LockRequest{Type: api.OperationPull, ResourceID: blob}

	start := time.Now()
	res, err := holder.Lock(context.Background(), req)
	require.NoError(t, err)
	require.Equal(t, heldTTL, res.Lease.TTL)
	ch := lockAsync(context.Background(), waiter, req)
	waitQueue(t, holder, req.Type, req.ResourceID, "node-b")

	require.Eventually(t, func() bool { return ct.count("POST /lock/keepalive") >= 10 }, testTimeout, 5*time.Millisecond)
	require.Greater(t, time.Since(start), 3*heldTTL)
	select {
	case <-res.Lease.Lost():
		t.Fatalf("lease lost while the holder lives: %v", res.Lease.Err())
	default:
	}
	require.NoError(t, res.Lease.Err())
	st := status(t, holder, req.Type, req.ResourceID)
	require.Equal(t, "node-a", st.Holder.NodeID)
	require.Equal(t, res.Lease.Fence, st.Holder.Fence, "the same grant, never expired and re-granted")
	require.Equal(t, []string{"node-b"}, queueNodes(st))
	requireWaiting(t, ch, "node-b")

	require.NoError(t, holder.Unlock(context.Background(), res.Lease, true, nil))
	require.True(t, res.Lease.keepaliveEnded(), "Unlock returned before the keepalive ended")
	o := recv(t, ch)
	require.NoError(t, o.err)
	require.True(t, o.res.Skipped)
}

// TestLeaseLostWhenServerDies: with the coordinator gone, renewals fail and
// Lost closes once the TTL has passed; Unlock then reports both.
func TestLeaseLostWhenServerDies(t *testing.T) {
	ts := lockservertest.Start(t, withShortTTL)
	c := newHTTPClient(t, ts.URL(), "node-a", WithMaxRetries(1))
	res, err := c.Lock(context.Background(), api.LockRequest{Type: api.OperationPull, ResourceID: blob})
	require.NoError(t, err)
	require.NoError(t, res.Lease.Err())

	ts.Stop()
	killed := time.Now()
	select {
	case <-res.Lease.Lost():
	case <-time.After(testTimeout):
		t.Fatal("Lost did not close")
	}
	// About a TTL after the last renewal: the lease's own clock, not a
	// renewal's request timing out. The bound is the rule's (before the
	// request timeout could end a renewal), not a wall-clock figure a
	// loaded machine breaks.
	require.Less(t, time.Since(killed), DefaultRequestTimeout, "Lost came from the TTL (%v), not a request's time-out", shortTTL)
	require.ErrorIs(t, res.Lease.Err(), ErrLeaseLost)

	err = c.Unlock(context.Background(), res.Lease, true, nil)
	require.ErrorIs(t, err, api.ErrUnavailable)
	require.ErrorIs(t, err, ErrLeaseLost)
}

// TestLeaseLostWhenTakenBack: when the coordinator no longer knows the
// lease (here: its grant was cancelled behind the holder's back, as after a
// coordinator restart), the next renewal says not_holder and Lost closes.
func TestLeaseLostWhenTakenBack(t *testing.T) {
	l := lockservertest.NewCoordinator(t, func(c *lockserver.Config) { c.LeaseTTL = heldTTL })
	c, err := NewEmbedded(l, testOptions("node-a")...)
	require.NoError(t, err)
	defer c.Close()
	res, err := c.Lock(context.Background(), api.LockRequest{Type: api.OperationUpdate, ResourceID: blob})
	require.NoError(t, err)

	require.NoError(t, l.Cancel(context.Background(), api.CancelRequest{Type: api.OperationUpdate, ResourceID: blob, NodeID: "node-a", RequestID: res.Lease.requestID}))
	select {
	case <-res.Lease.Lost():
	case <-time.After(testTimeout):
		t.Fatal("Lost did not close")
	}
	require.ErrorIs(t, res.Lease.Err(), ErrLeaseLost)
	require.ErrorIs(t, res.Lease.Err(), api.ErrNotHolder, "lost because the coordinator said so, not by timing out")
	err = c.Unlock(context.Background(), res.Lease, true, nil)
	require.ErrorIs(t, err, api.ErrNotHolder)
	require.ErrorIs(t, err, ErrLeaseLost)
}

// TestUnlockAfterCancel: Unlock with an already cancelled context still
// releases, and records the success.
func TestUnlockAfterCancel(t *testing.T) {
	ts := lockservertest.Start(t)
	c := newHTTPClient(t, ts.URL(), "node-a")
	members.Open(t, ts.Core(), "node-a")
	ctx, cancel := context.WithCancel(context.Background())
	res, err := c.Lock(ctx, api.LockRequest{Type: api.OperationPull, ResourceID: blob})
	require.NoError(t, err)
	require.True(t, res.Acquired)
	cancel()

	require.NoError(t, c.Unlock(ctx, res.Lease, true, nil))
	st := status(t, c, api.OperationPull, blob)
	require.Nil(t, st.Holder)
	require.NotNil(t, st.Completed)
	refs, err := c.Refs(context.Background(), blob)
	require.NoError(t, err)
	require.Equal(t, []string{"node-a"}, refs.Nodes)
	// Unlock is idempotent.
	require.NoError(t, c.Unlock(ctx, res.Lease, true, nil))
}

// TestCloseStopsKeepalives: Close ends the keepalive of a lease that was
// never unlocked; the coordinator then lets it expire.
func TestCloseStopsKeepalives(t *testing.T) {
	ts := lockservertest.Start(t, withShortTTL)
	c := newHTTPClient(t, ts.URL(), "node-a")
	res, err := c.Lock(context.Background(), api.LockRequest{Type: api.OperationPull, ResourceID: blob})
	require.NoError(t, err)
	require.NoError(t, c.Close())
	require.True(t, res.Lease.keepaliveEnded(), "Close returned before the keepalive ended")
	other := newHTTPClient(t, ts.URL(), "node-b")
	require.Eventually(t, func() bool { return status(t, other, api.OperationPull, blob).Holder == nil },
		testTimeout, 10*time.Millisecond, "the unrenewed lease expires")
}

// keepaliveEnded reports whether the lease's keepalive has ended for good:
// stopped, so that no renewal starts (stop has also waited for one in
// flight before Unlock or Close returns).
func (l *Lease) keepaliveEnded() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.stopped
}

// TestLostAskedAfterTheLoss: Lost, asked for the first time after the
// lease lapsed, is already closed.
func TestLostAskedAfterTheLoss(t *testing.T) {
	l := newLease(api.LockRequest{Type: api.OperationPull, ResourceID: blob}, api.LockResponse{LeaseID: "l1"})
	l.ctx = context.Background()
	l.lose(ErrLeaseLost)
	select {
	case <-l.Lost():
	default:
		t.Fatal("Lost is open after the loss")
	}
	require.ErrorIs(t, l.Err(), ErrLeaseLost)
}

// withLeaseTTL starts the coordinator with lease TTL d.
func withLeaseTTL(d time.Duration) lockservertest.Option {
	return lockservertest.WithServerConfig(func(c *httpserver.Config) { c.LeaseTTL = d })
}

// TestLeaseHeldUntil: HeldUntil counts a TTL less a tenth from the sending
// of the request the grant answered, moves on with each renewal, and is
// zero once the lease is lost.
func TestLeaseHeldUntil(t *testing.T) {
	ts := lockservertest.Start(t, withShortTTL)
	c := newHTTPClient(t, ts.URL(), "node-a", WithMaxRetries(1))
	sent := time.Now()
	res, err := c.Lock(context.Background(), api.LockRequest{Type: api.OperationPull, ResourceID: blob})
	require.NoError(t, err)
	held := shortTTL - shortTTL/10
	until := res.Lease.HeldUntil()
	require.False(t, until.Before(sent.Add(held)), "counted from before the request was sent")
	require.False(t, until.After(time.Now().Add(held)), "counted from after the grant arrived")
	require.Eventually(t, func() bool { return res.Lease.HeldUntil().After(until) }, testTimeout, 5*time.Millisecond,
		"a renewal moves it on")

	ts.Stop()
	select {
	case <-res.Lease.Lost():
	case <-time.After(testTimeout):
		t.Fatal("Lost did not close")
	}
	require.True(t, res.Lease.HeldUntil().IsZero(), "zero once lost")
	require.ErrorIs(t, c.Unlock(context.Background(), res.Lease, true, nil), ErrLeaseLost)
}
