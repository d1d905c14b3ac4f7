package coordinatortest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sharedcontent/sharedcontent/contentv2"
	"github.com/sharedcontent/sharedcontent/lockserver/api"
)

// testLockHeld: a held lock is ErrLocked to a request that may not wait;
// it checks out and has a lease while held, and not after its unlock;
// every grant's fence is larger than the one before.
func testLockHeld(t *testing.T, c Cluster) {
	ctx := t.Context()
	ns := members(t, c, 2)
	n1, n2 := ns[0], ns[1]

	l := lock(t, n1, pull(blob(1)))
	_, err := n2.Lock(ctx, pull(blob(1)))
	require.ErrorIs(t, err, api.ErrLocked)
	require.NoError(t, l.Check(ctx), "a held lock checks out")
	require.True(t, l.HeldUntil().After(time.Now()), "a held lock has a lease")
	require.NoError(t, l.Unlock(ctx, false, errors.New("download failed")))
	require.Error(t, l.Check(ctx), "a released lock does not check out")

	l2 := lock(t, n2, pull(blob(1)))
	require.Greater(t, l2.Fence(), l.Fence(), "fences increase")
	l3 := lock(t, n1, pull(blob(2)))
	require.Greater(t, l3.Fence(), l2.Fence(), "fences increase over all resources")
	require.NoError(t, l2.Unlock(ctx, false, nil))
	require.NoError(t, l3.Unlock(ctx, false, nil))
}

// testPullSkip: a pull's success adds its holder's reference, and a pull
// of the blob after it is ErrSkipped, waiting or not; a failed pull is
// not remembered.
func testPullSkip(t *testing.T, c Cluster) {
	ctx := t.Context()
	ns := members(t, c, 2)
	n1, n2 := ns[0], ns[1]

	l := lock(t, n1, pull(blob(1)))
	require.NoError(t, l.Unlock(ctx, true, nil))
	require.Equal(t, map[string][]string{blob(1).String(): {"node-1"}}, refs(t, n2))
	_, err := n2.Lock(ctx, pull(blob(1)))
	require.ErrorIs(t, err, api.ErrSkipped)
	_, err = n2.Lock(ctx, waiting(pull(blob(1))))
	require.ErrorIs(t, err, api.ErrSkipped)

	l = lock(t, n1, pull(blob(2)))
	require.NoError(t, l.Unlock(ctx, false, nil))
	require.NoError(t, lock(t, n2, pull(blob(2))).Unlock(ctx, false, nil), "a failed pull is not remembered")
}

// testQueueHandOver: waiters queue behind the holder in order; a failed
// pull hands the lock to the head of the queue, a successful one answers
// every waiter ErrSkipped.
func testQueueHandOver(t *testing.T, c Cluster) {
	ctx := t.Context()
	ns := members(t, c, 3)
	n1, n2, n3 := ns[0], ns[1], ns[2]

	req := waiting(pull(blob(1)))
	held := lock(t, n1, req)
	second := ask(ctx, n2, req)
	awaitQueued(t, c, api.OperationPull, blob(1).String(), 1)
	third := ask(ctx, n3, req)
	awaitQueued(t, c, api.OperationPull, blob(1).String(), 2)

	require.NoError(t, held.Unlock(ctx, false, errors.New("download failed")))
	a := <-second
	require.NoError(t, a.err, "the head of the queue takes over a failed pull")
	require.Greater(t, a.l.Fence(), held.Fence())
	require.Equal(t, 1, c.Queued(t, api.OperationPull, blob(1).String()), "the rest stay queued")
	require.NoError(t, a.l.Unlock(ctx, true, nil))
	a = <-third
	require.ErrorIs(t, a.err, api.ErrSkipped, "pulled by the one before")
	require.Equal(t, map[string][]string{blob(1).String(): {"node-2"}}, refs(t, n1))
}

// testWaitCancelled: a waiter whose context ends returns its error and
// leaves the queue: the lock released as a failure goes to nobody, and
// the next request is granted.
func testWaitCancelled(t *testing.T, c Cluster) {
	ctx := t.Context()
	ns := members(t, c, 2)
	n1, n2 := ns[0], ns[1]

	held := lock(t, n1, pull(blob(1)))
	wctx, cancel := context.WithCancel(ctx)
	done := ask(wctx, n2, waiting(pull(blob(1))))
	awaitQueued(t, c, api.OperationPull, blob(1).String(), 1)
	cancel()
	require.ErrorIs(t, (<-done).err, context.Canceled)
	awaitQueued(t, c, api.OperationPull, blob(1).String(), 0)
	require.NoError(t, held.Unlock(ctx, false, nil))
	require.NoError(t, lock(t, n1, pull(blob(1))).Unlock(ctx, false, nil), "nobody took the lock")
}

// testCompatibility: on one resource a pull and an update may be held
// together; a delete is held alone (docs/design.md §3.2).
func testCompatibility(t *testing.T, c Cluster) {
	ctx := t.Context()
	ns := members(t, c, 2)
	n1, n2 := ns[0], ns[1]

	p := lock(t, n1, pull(blob(1)))
	u := lock(t, n2, api.LockRequest{Type: api.OperationUpdate, ResourceID: blob(1).String(), Wait: new(false)})
	_, err := n2.Lock(ctx, del(blob(1)))
	require.ErrorIs(t, err, api.ErrLocked, "a delete beside a pull and an update")
	require.NoError(t, p.Unlock(ctx, false, nil))
	require.NoError(t, u.Unlock(ctx, true, nil))

	d := lock(t, n1, del(blob(1)))
	_, err = n2.Lock(ctx, pull(blob(1)))
	require.ErrorIs(t, err, api.ErrLocked, "a pull beside a delete")
	_, err = n2.Lock(ctx, api.LockRequest{Type: api.OperationUpdate, ResourceID: blob(1).String(), Wait: new(false)})
	require.ErrorIs(t, err, api.ErrLocked, "an update beside a delete")
	require.NoError(t, d.Unlock(ctx, false, nil))
}

// answer is what a Lock call returned.
type answer struct {
	l   contentv2.Lock
	err error
}

// ask sends req as node n at once, and answers on the channel returned.
func ask(ctx context.Context, n contentv2.Coordinator, req api.LockRequest) <-chan answer {
	ch := make(chan answer, 1)
	go func() {
		l, err := n.Lock(ctx, req)
		ch <- answer{l, err}
	}()
	return ch
}

// waiting is req queued behind the holder instead of refused.
func waiting(req api.LockRequest) api.LockRequest {
	req.Wait = new(true)
	return req
}

// awaitTimeout bounds awaitQueued: it only ends a test that would
// otherwise hang; no outcome depends on it.
const awaitTimeout = time.Minute

// awaitQueued waits until n requests of op wait in resource's queue.
func awaitQueued(t *testing.T, c Cluster, op api.OperationType, resource string, n int) {
	t.Helper()
	require.Eventually(t, func() bool { return c.Queued(t, op, resource) == n }, awaitTimeout, time.Millisecond,
		"%d waiting for %s:%s", n, op, resource)
}

// testQueueAcrossTypes: a delete queued behind a pull starts once the pull
// failed; when the delete succeeds, a delete queued behind it is answered
// ErrSkipped and a pull queued behind it is granted, since the blob is
// gone (docs/design.md §3.2, §3.4).
func testQueueAcrossTypes(t *testing.T, c Cluster) {
	ctx := t.Context()
	ns := members(t, c, 3)
	n1, n2, n3 := ns[0], ns[1], ns[2]
	resource := blob(1).String()

	p := lock(t, n1, pull(blob(1)))
	deleting := ask(ctx, n2, waiting(del(blob(1))))
	awaitQueued(t, c, api.OperationDelete, resource, 1)
	require.NoError(t, p.Unlock(ctx, false, errors.New("download failed")))
	d := <-deleting
	require.NoError(t, d.err, "the delete starts once the pull is gone")

	pulling := ask(ctx, n1, waiting(pull(blob(1))))
	awaitQueued(t, c, api.OperationPull, resource, 1)
	again := ask(ctx, n3, waiting(del(blob(1))))
	awaitQueued(t, c, api.OperationDelete, resource, 1)
	require.NoError(t, d.l.Unlock(ctx, true, nil))
	require.ErrorIs(t, (<-again).err, api.ErrSkipped, "deleted just now")
	a := <-pulling
	require.NoError(t, a.err, "the blob is gone: the pull downloads it again")
	require.Greater(t, a.l.Fence(), d.l.Fence())
	require.NoError(t, a.l.Unlock(ctx, false, nil))
}
