package lockserver

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sharedcontent/sharedcontent/lockserver/api"
	"github.com/sharedcontent/sharedcontent/refcount"
)

const blob = "sha256:aaaa"

func newTestCoordinator(t testing.TB, mutate ...func(*Config)) *Coordinator {
	t.Helper()
	cfg := DefaultConfig()
	for _, m := range mutate {
		m(&cfg)
	}
	c, err := NewCoordinator(cfg, Options{Refs: refcount.NewManager(refcount.NewMemoryStorage())})
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	return c
}

func newTestRefs() *refcount.Manager {
	return refcount.NewManager(refcount.NewMemoryStorage())
}

func lockReq(typ api.OperationType, node string) api.LockRequest {
	return api.LockRequest{Type: typ, ResourceID: blob, NodeID: node}
}

// locked is a Lock answer with the node that asked: a request is known by
// both.
type locked struct {
	api.LockResponse
	Node string
}

func mustLock(t *testing.T, c *Coordinator, typ api.OperationType, node string) locked {
	t.Helper()
	resp, err := c.Lock(context.Background(), lockReq(typ, node))
	require.NoError(t, err)
	return locked{resp, node}
}

func unlock(t *testing.T, c *Coordinator, typ api.OperationType, lease string, success bool) {
	t.Helper()
	_, err := c.Unlock(context.Background(), api.UnlockRequest{Type: typ, ResourceID: blob, LeaseID: lease, Success: success})
	require.NoError(t, err)
}

func TestCompatibilityMatrix(t *testing.T) {
	types := []api.OperationType{api.OperationPull, api.OperationUpdate, api.OperationDelete}
	// docs/design.md §3.2: only pull+update may be held together.
	allowed := map[[2]api.OperationType]bool{
		{api.OperationPull, api.OperationUpdate}: true,
		{api.OperationUpdate, api.OperationPull}: true,
	}
	for _, held := range types {
		for _, requested := range types {
			t.Run(string(held)+"/"+string(requested), func(t *testing.T) {
				c := newTestCoordinator(t)
				first := mustLock(t, c, held, "n1")
				require.True(t, first.Acquired)
				second := mustLock(t, c, requested, "n2")
				if allowed[[2]api.OperationType{held, requested}] {
					require.True(t, second.Acquired, "held %s, requested %s", held, requested)
				} else {
					require.False(t, second.Acquired)
					require.True(t, second.Queued)
					require.Equal(t, 1, second.Position)
				}
			})
		}
	}
}

func TestAcquireReleasePaths(t *testing.T) {
	ctx := context.Background()

	t.Run("pull success: refs added, completion retained, waiters and newcomers skip", func(t *testing.T) {
		coord := newTestCoordinator(t)
		members(t, coord, "n1", "n2", "n3")
		a := mustLock(t, coord, api.OperationPull, "n1")
		w := mustLock(t, coord, api.OperationPull, "n2")
		require.True(t, w.Queued)
		sub, err := coord.Subscribe(api.OperationPull, blob, w.Node, w.RequestID)
		require.NoError(t, err)
		defer sub.Close()
		unlock(t, coord, api.OperationPull, a.LeaseID, true)
		ev := <-sub.Events()
		require.Equal(t, api.EventCompleted, ev.Name)
		_, open := <-sub.Events()
		require.False(t, open, "the waiter's stream ends with its wait")
		require.True(t, mustLock(t, coord, api.OperationPull, "n3").Skip)
		refs, err := coord.Refs(ctx, blob)
		require.NoError(t, err)
		require.Equal(t, []string{"n1"}, refs.Nodes)
	})

	t.Run("failure hands the lock to the next waiter in FIFO order, others keep waiting", func(t *testing.T) {
		coord := newTestCoordinator(t)
		members(t, coord, "n1", "n2", "n3")
		a := mustLock(t, coord, api.OperationPull, "n1")
		b := mustLock(t, coord, api.OperationPull, "n2")
		c := mustLock(t, coord, api.OperationPull, "n3")
		sb, _ := coord.Subscribe(api.OperationPull, blob, b.Node, b.RequestID)
		sc, _ := coord.Subscribe(api.OperationPull, blob, c.Node, c.RequestID)
		defer sb.Close()
		defer sc.Close()
		unlock(t, coord, api.OperationPull, a.LeaseID, false)
		ev := <-sb.Events()
		require.Equal(t, api.EventGranted, ev.Name)
		require.NotNil(t, ev.Lease)
		require.Greater(t, ev.Lease.Fence, a.Fence)
		require.Empty(t, sc.Events(), "the third waiter must not be woken")
		st, err := coord.Status(context.Background(), api.OperationPull, blob, c.Node, c.RequestID)
		require.NoError(t, err)
		require.Equal(t, "n2", st.Holder.NodeID)
		require.Equal(t, 1, st.Request.Position)
		refs, _ := coord.Refs(ctx, blob)
		require.Zero(t, refs.Count, "a failed pull adds no reference")
	})

	t.Run("delete in_use while others reference, requester's own ref dropped", func(t *testing.T) {
		coord := newTestCoordinator(t)
		members(t, coord, "n1", "n2", "n3")
		_, err := coord.AddRef(ctx, blob, "n1")
		require.NoError(t, err)
		_, err = coord.AddRef(ctx, blob, "n2")
		require.NoError(t, err)
		_, err = coord.Lock(ctx, lockReq(api.OperationDelete, "n1"))
		var inUse *api.InUseError
		require.ErrorAs(t, err, &inUse)
		require.ErrorIs(t, err, api.ErrInUse)
		require.Equal(t, []string{"n2"}, inUse.Refs.Nodes)
		d := mustLock(t, coord, api.OperationDelete, "n2")
		require.True(t, d.Acquired, "the last reference may delete")
	})

	t.Run("delete success forgets the pull completion and is itself retained", func(t *testing.T) {
		coord := newTestCoordinator(t)
		members(t, coord, "n1", "n2", "n3")
		p := mustLock(t, coord, api.OperationPull, "n1")
		unlock(t, coord, api.OperationPull, p.LeaseID, true)
		d := mustLock(t, coord, api.OperationDelete, "n1")
		require.True(t, d.Acquired)
		unlock(t, coord, api.OperationDelete, d.LeaseID, true)
		require.True(t, mustLock(t, coord, api.OperationDelete, "n2").Skip)
		p2 := mustLock(t, coord, api.OperationPull, "n2")
		require.True(t, p2.Acquired, "after a delete the blob must be downloaded again")
		unlock(t, coord, api.OperationPull, p2.LeaseID, true)
		d2 := mustLock(t, coord, api.OperationDelete, "n2")
		require.True(t, d2.Acquired, "a successful pull forgets the delete completion")
	})

	t.Run("queued delete refused when the pull it waited for succeeds", func(t *testing.T) {
		coord := newTestCoordinator(t)
		members(t, coord, "n1", "n2", "n3")
		p := mustLock(t, coord, api.OperationPull, "n1")
		d := mustLock(t, coord, api.OperationDelete, "n2")
		require.True(t, d.Queued)
		sd, _ := coord.Subscribe(api.OperationDelete, blob, d.Node, d.RequestID)
		defer sd.Close()
		unlock(t, coord, api.OperationPull, p.LeaseID, true)
		ev := <-sd.Events()
		require.Equal(t, api.EventError, ev.Name)
		require.Equal(t, api.CodeInUse, ev.Error.Code)
		refs, _ := coord.Refs(ctx, blob)
		require.Equal(t, []string{"n1"}, refs.Nodes)
	})

	t.Run("queued delete starts once the pull fails", func(t *testing.T) {
		coord := newTestCoordinator(t)
		members(t, coord, "n1", "n2", "n3")
		p := mustLock(t, coord, api.OperationPull, "n1")
		d := mustLock(t, coord, api.OperationDelete, "n2")
		sd, _ := coord.Subscribe(api.OperationDelete, blob, d.Node, d.RequestID)
		defer sd.Close()
		unlock(t, coord, api.OperationPull, p.LeaseID, false)
		ev := <-sd.Events()
		require.Equal(t, api.EventGranted, ev.Name)
	})

	t.Run("queued pulls start once the delete is gone", func(t *testing.T) {
		coord := newTestCoordinator(t)
		members(t, coord, "n1", "n2", "n3")
		d := mustLock(t, coord, api.OperationDelete, "n1")
		p := mustLock(t, coord, api.OperationPull, "n2")
		u := mustLock(t, coord, api.OperationUpdate, "n3")
		sp, _ := coord.Subscribe(api.OperationPull, blob, p.Node, p.RequestID)
		su, _ := coord.Subscribe(api.OperationUpdate, blob, u.Node, u.RequestID)
		defer sp.Close()
		defer su.Close()
		unlock(t, coord, api.OperationDelete, d.LeaseID, true)
		require.Equal(t, api.EventGranted, (<-sp.Events()).Name)
		require.Equal(t, api.EventGranted, (<-su.Events()).Name, "pull and update are compatible: both start")
	})

	t.Run("update success grants the next update waiter; no completion retained", func(t *testing.T) {
		coord := newTestCoordinator(t)
		members(t, coord, "n1", "n2", "n3")
		a := mustLock(t, coord, api.OperationUpdate, "n1")
		b := mustLock(t, coord, api.OperationUpdate, "n2")
		sb, _ := coord.Subscribe(api.OperationUpdate, blob, b.Node, b.RequestID)
		defer sb.Close()
		unlock(t, coord, api.OperationUpdate, a.LeaseID, true)
		require.Equal(t, api.EventGranted, (<-sb.Events()).Name)
		st, _ := coord.Status(context.Background(), api.OperationUpdate, blob, "", "")
		require.Nil(t, st.Completed)
	})

	t.Run("update refused while others reference, with update_requires_no_ref", func(t *testing.T) {
		coord := newTestCoordinator(t, func(c *Config) { c.UpdateRequiresNoRef = true })
		members(t, coord, "n1", "n2", "n3")
		_, err := coord.AddRef(ctx, blob, "n2")
		require.NoError(t, err)
		_, err = coord.Lock(ctx, lockReq(api.OperationUpdate, "n1"))
		require.ErrorIs(t, err, api.ErrInUse)
		require.True(t, mustLock(t, coord, api.OperationUpdate, "n2").Acquired, "own reference does not block")
	})

	t.Run("wait=false and wait_by_default=false answer locked without queueing", func(t *testing.T) {
		no, yes := false, true
		coord := newTestCoordinator(t, func(c *Config) { c.WaitByDefault = false })
		members(t, coord, "n1", "n2", "n3")
		mustLock(t, coord, api.OperationPull, "n1")
		_, err := coord.Lock(ctx, lockReq(api.OperationPull, "n2"))
		require.ErrorIs(t, err, api.ErrLocked)
		req := lockReq(api.OperationPull, "n2")
		req.Wait = &no
		_, err = coord.Lock(ctx, req)
		require.ErrorIs(t, err, api.ErrLocked)
		req.Wait = &yes
		resp, err := coord.Lock(ctx, req)
		require.NoError(t, err)
		require.True(t, resp.Queued, "wait=true overrides the server default")
		st, _ := coord.Status(context.Background(), api.OperationPull, blob, "", "")
		require.Len(t, st.Queue, 1)
	})

	t.Run("same request_id is idempotent for grants and queue entries", func(t *testing.T) {
		coord := newTestCoordinator(t)
		members(t, coord, "n1", "n2", "n3")
		req := lockReq(api.OperationPull, "n1")
		req.RequestID = "r1"
		a1, err := coord.Lock(ctx, req)
		require.NoError(t, err)
		a2, err := coord.Lock(ctx, req)
		require.NoError(t, err)
		require.Equal(t, a1, a2)
		req2 := lockReq(api.OperationPull, "n2")
		req2.RequestID = "r2"
		q1, _ := coord.Lock(ctx, req2)
		q2, _ := coord.Lock(ctx, req2)
		require.Equal(t, q1, q2)
		st, _ := coord.Status(context.Background(), api.OperationPull, blob, "", "")
		require.Len(t, st.Queue, 1)
	})

	t.Run("unlock: wrong lease refused and nothing changes; retry with same outcome ok", func(t *testing.T) {
		coord := newTestCoordinator(t)
		members(t, coord, "n1", "n2", "n3")
		a := mustLock(t, coord, api.OperationPull, "n1")
		_, err := coord.Unlock(ctx, api.UnlockRequest{Type: api.OperationPull, ResourceID: blob, LeaseID: "bogus", Success: true})
		require.ErrorIs(t, err, api.ErrNotHolder)
		_, err = coord.Unlock(ctx, api.UnlockRequest{Type: api.OperationUpdate, ResourceID: blob, LeaseID: a.LeaseID, Success: true})
		require.ErrorIs(t, err, api.ErrNotHolder, "a lease is bound to its key")
		st, _ := coord.Status(context.Background(), api.OperationPull, blob, "", "")
		require.NotNil(t, st.Holder)
		unlock(t, coord, api.OperationPull, a.LeaseID, true)
		unlock(t, coord, api.OperationPull, a.LeaseID, true)
		_, err = coord.Unlock(ctx, api.UnlockRequest{Type: api.OperationPull, ResourceID: blob, LeaseID: a.LeaseID, Success: false})
		require.ErrorIs(t, err, api.ErrNotHolder, "a different outcome is not a retry")
	})

	t.Run("refs/add refused while a delete is in flight", func(t *testing.T) {
		coord := newTestCoordinator(t)
		members(t, coord, "n1", "n2", "n3")
		d := mustLock(t, coord, api.OperationDelete, "n1")
		_, err := coord.AddRef(ctx, blob, "n2")
		require.ErrorIs(t, err, api.ErrDeleting)
		unlock(t, coord, api.OperationDelete, d.LeaseID, false)
		_, err = coord.AddRef(ctx, blob, "n2")
		require.NoError(t, err)
	})

	// A node that found the blob after a delete succeeded may have seen
	// the deleted file through its filesystem's caches (GlusterFS shows it
	// for about a second): its reference is refused and recorded nowhere,
	// until a pull or a committing node's reference follows the delete.
	t.Run("refs/add found refused after a delete, until a pull or reference", func(t *testing.T) {
		coord := newTestCoordinator(t)
		members(t, coord, "n1", "n2", "n3")
		d := mustLock(t, coord, api.OperationDelete, "n1")
		unlock(t, coord, api.OperationDelete, d.LeaseID, true)
		_, err := coord.AddFoundRef(ctx, blob, "n2")
		require.ErrorIs(t, err, api.ErrDeleting)
		require.ErrorContains(t, err, "deleted by node n1")
		refs, err := coord.Refs(ctx, blob)
		require.NoError(t, err)
		require.Zero(t, refs.Count, "a refused reference is recorded nowhere")

		_, err = coord.AddRef(ctx, blob, "n3") // n3 commits the blob again
		require.NoError(t, err)
		_, err = coord.AddFoundRef(ctx, blob, "n2")
		require.NoError(t, err, "found after the blob's new reference")

		l2 := newTestCoordinator(t)

		members(t, l2, "n1", "n2", "n3")
		d = mustLock(t, l2, api.OperationDelete, "n1")
		unlock(t, l2, api.OperationDelete, d.LeaseID, true)
		p := mustLock(t, l2, api.OperationPull, "n3")
		unlock(t, l2, api.OperationPull, p.LeaseID, true)
		_, err = l2.AddFoundRef(ctx, blob, "n2")
		require.NoError(t, err, "found after the blob's new pull")
	})

	t.Run("cancel removes a waiter; cancel of a grant hands over", func(t *testing.T) {
		coord := newTestCoordinator(t)
		members(t, coord, "n1", "n2", "n3")
		a := mustLock(t, coord, api.OperationPull, "n1")
		b := mustLock(t, coord, api.OperationPull, "n2")
		c := mustLock(t, coord, api.OperationPull, "n3")
		require.NoError(t, coord.Cancel(ctx, api.CancelRequest{Type: api.OperationPull, ResourceID: blob, NodeID: b.Node, RequestID: b.RequestID}))
		require.NoError(t, coord.Cancel(ctx, api.CancelRequest{Type: api.OperationPull, ResourceID: blob, NodeID: a.Node, RequestID: a.RequestID}))
		st, _ := coord.Status(context.Background(), api.OperationPull, blob, c.Node, c.RequestID)
		require.True(t, st.Request.Acquired, "the cancelled holder handed over to the next live waiter")
		require.Empty(t, st.Queue)
	})

	t.Run("fences strictly increase", func(t *testing.T) {
		coord := newTestCoordinator(t)
		members(t, coord, "n1", "n2", "n3")
		var last uint64
		for range 100 {
			a := mustLock(t, coord, api.OperationUpdate, "n1")
			require.Greater(t, a.Fence, last)
			last = a.Fence
			unlock(t, coord, api.OperationUpdate, a.LeaseID, true)
		}
	})
}

func TestLeaseExpiryHandsOver(t *testing.T) {
	// The sweeps are driven by hand, at chosen times: with a TTL of a
	// minute the background sweepers never expire anything meanwhile.
	coord := newTestCoordinator(t, func(c *Config) { c.LeaseTTL = time.Minute; c.ClaimTimeout = time.Hour })
	ctx := context.Background()
	a := mustLock(t, coord, api.OperationPull, "n1")
	b := mustLock(t, coord, api.OperationPull, "n2")
	sb, err := coord.Subscribe(api.OperationPull, blob, b.Node, b.RequestID)
	require.NoError(t, err)
	defer sb.Close()
	// Keepalives keep the holder: a sweep within a TTL of the last one
	// wakes nobody.
	for range 5 {
		_, err := coord.Keepalive(ctx, api.KeepaliveRequest{Type: api.OperationPull, ResourceID: blob, LeaseID: a.LeaseID})
		require.NoError(t, err)
		coord.sweepOf(blob, time.Now().Add(coord.cfg.LeaseTTL*9/10))
		require.Empty(t, sb.Events(), "waiter woken while the holder renews")
	}
	// Then it stops renewing: the lease expires and the waiter gets it.
	coord.sweepOf(blob, time.Now().Add(coord.cfg.LeaseTTL+time.Second))
	ev := receive(t, sb.Events())
	require.Equal(t, api.EventGranted, ev.Name)
	_, err = coord.Keepalive(ctx, api.KeepaliveRequest{Type: api.OperationPull, ResourceID: blob, LeaseID: a.LeaseID})
	require.ErrorIs(t, err, api.ErrNotHolder)
	_, err = coord.Unlock(ctx, api.UnlockRequest{Type: api.OperationPull, ResourceID: blob, LeaseID: a.LeaseID, Success: true})
	require.ErrorIs(t, err, api.ErrNotHolder, "an expired lease cannot record success")
}

func TestUnclaimedGrantIsReleased(t *testing.T) {
	coord := newTestCoordinator(t, func(c *Config) { c.ClaimTimeout = 50 * time.Millisecond })
	a := mustLock(t, coord, api.OperationPull, "n1")
	b := mustLock(t, coord, api.OperationPull, "n2") // polls, never subscribes
	c := mustLock(t, coord, api.OperationPull, "n3")
	sc, _ := coord.Subscribe(api.OperationPull, blob, c.Node, c.RequestID)
	defer sc.Close()
	unlock(t, coord, api.OperationPull, a.LeaseID, false) // b is granted but never claims
	ev := <-sc.Events()
	require.Equal(t, api.EventGranted, ev.Name, "b's unclaimed grant passed to c")
	st, _ := coord.Status(context.Background(), api.OperationPull, blob, b.Node, b.RequestID)
	require.False(t, st.Request.Acquired)
}

func TestClosedStreamLeavesQueue(t *testing.T) {
	c := newTestCoordinator(t)
	mustLock(t, c, api.OperationPull, "n1")
	b := mustLock(t, c, api.OperationPull, "n2")
	sb, err := c.Subscribe(api.OperationPull, blob, b.Node, b.RequestID)
	require.NoError(t, err)
	require.Equal(t, 1, sb.First.Request.Position)
	sb.Close()
	st, _ := c.Status(context.Background(), api.OperationPull, blob, b.Node, b.RequestID)
	require.Empty(t, st.Queue)
	require.False(t, st.Request.Queued)
}

func TestSubscribeAfterCompletionSeesIt(t *testing.T) {
	c := newTestCoordinator(t)
	members(t, c, "n1", "n2")
	a := mustLock(t, c, api.OperationPull, "n1")
	b := mustLock(t, c, api.OperationPull, "n2")
	unlock(t, c, api.OperationPull, a.LeaseID, true) // before b subscribes
	sb, err := c.Subscribe(api.OperationPull, blob, b.Node, b.RequestID)
	require.NoError(t, err)
	defer sb.Close()
	require.NotNil(t, sb.First.Request)
	require.True(t, sb.First.Request.Skip, "no lost wake-up")
	_, open := <-sb.Events()
	require.False(t, open, "nothing follows for a finished request")
}

func TestTargetedWakeups(t *testing.T) {
	c := newTestCoordinator(t)
	members(t, c, "n1", "n2")
	other := "sha256:bbbb"
	a := mustLock(t, c, api.OperationPull, "n1")
	b := mustLock(t, c, api.OperationPull, "n2")
	o1, err := c.Lock(context.Background(), api.LockRequest{Type: api.OperationPull, ResourceID: other, NodeID: "n1"})
	require.NoError(t, err)
	o2, err := c.Lock(context.Background(), api.LockRequest{Type: api.OperationPull, ResourceID: other, NodeID: "n2"})
	require.NoError(t, err)
	require.True(t, o1.Acquired)
	sOther, _ := c.Subscribe(api.OperationPull, other, "n2", o2.RequestID)
	defer sOther.Close()
	sUpd, _ := c.Subscribe(api.OperationUpdate, blob, "", "") // a watcher of another type of the same blob
	defer sUpd.Close()
	sb, _ := c.Subscribe(api.OperationPull, blob, b.Node, b.RequestID)
	defer sb.Close()
	unlock(t, c, api.OperationPull, a.LeaseID, true)
	require.Equal(t, api.EventCompleted, (<-sb.Events()).Name)
	require.Empty(t, sOther.Events(), "waiters of another resource are not woken")
	require.Empty(t, sUpd.Events(), "watchers of another key are not woken")
}

func TestLockValidation(t *testing.T) {
	c := newTestCoordinator(t)
	long := make([]byte, api.MaxResourceIDLen+1)
	for i := range long {
		long[i] = 'a'
	}
	for name, req := range map[string]api.LockRequest{
		"unknown type":      {Type: "merge", ResourceID: blob, NodeID: "n1"},
		"empty type":        {ResourceID: blob, NodeID: "n1"},
		"empty resource":    {Type: api.OperationPull, NodeID: "n1"},
		"empty node":        {Type: api.OperationPull, ResourceID: blob},
		"control character": {Type: api.OperationPull, ResourceID: "sha256:a\nb", NodeID: "n1"},
		"oversized id":      {Type: api.OperationPull, ResourceID: string(long), NodeID: "n1"},
		"invalid utf8":      {Type: api.OperationPull, ResourceID: "\xff", NodeID: "n1"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := c.Lock(context.Background(), req)
			require.ErrorIs(t, err, api.ErrInvalidArgument)
			require.False(t, errors.Is(err, api.ErrInUse))
		})
	}
	for _, sh := range c.locks.shards {
		require.Empty(t, sh.resources, "invalid requests change nothing")
	}
}

func TestNoPullSkipWhileDeleteInFlight(t *testing.T) {
	c := newTestCoordinator(t)
	members(t, c, "n1", "n2")
	p := mustLock(t, c, api.OperationPull, "n1")
	unlock(t, c, api.OperationPull, p.LeaseID, true)
	_, err := c.Refs(context.Background(), blob)
	require.NoError(t, err)
	d := mustLock(t, c, api.OperationDelete, "n1")
	require.True(t, d.Acquired)
	// The pull completion is still retained, but the blob is being removed.
	resp := mustLock(t, c, api.OperationPull, "n2")
	require.False(t, resp.Skip, "a pull must not skip while a delete removes the blob")
	require.True(t, resp.Queued)
	unlock(t, c, api.OperationDelete, d.LeaseID, true)
	st, err := c.Status(context.Background(), api.OperationPull, blob, resp.Node, resp.RequestID)
	require.NoError(t, err)
	require.True(t, st.Request.Acquired, "after the delete, the pull downloads again")
}

// TestReleasedRemembersForALeaseTTL: a release is remembered, for a
// retried Unlock whose answer was lost, for a lease TTL, then forgotten.
func TestReleasedRemembersForALeaseTTL(t *testing.T) {
	c := newTestCoordinator(t)
	members(t, c, "n1")
	a := mustLock(t, c, api.OperationPull, "n1")
	unlock(t, c, api.OperationPull, a.LeaseID, true)
	c.sweepOf(blob, time.Now().Add(c.cfg.LeaseTTL/2))
	unlock(t, c, api.OperationPull, a.LeaseID, true)
	// A retry must name the same key (another type once got 200).
	for _, req := range []api.UnlockRequest{
		{Type: api.OperationDelete, ResourceID: blob, LeaseID: a.LeaseID, Success: true},
		{Type: api.OperationUpdate, ResourceID: blob, LeaseID: a.LeaseID, Success: true},
		{Type: api.OperationPull, ResourceID: blob + "b", LeaseID: a.LeaseID, Success: true},
		{Type: api.OperationPull, ResourceID: blob, LeaseID: a.LeaseID, Success: false},
	} {
		_, err := c.Unlock(context.Background(), req)
		require.ErrorIs(t, err, api.ErrNotHolder, "%+v", req)
	}

	c.sweepOf(blob, time.Now().Add(c.cfg.LeaseTTL+time.Second))
	_, err := c.Unlock(context.Background(), api.UnlockRequest{Type: api.OperationPull, ResourceID: blob, LeaseID: a.LeaseID, Success: true})
	require.ErrorIs(t, err, api.ErrNotHolder)
	sh := c.locks.shardFor(blob)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	require.Empty(t, sh.released)
}

// gatedStorage holds reference writes at a gate once armed, to observe what
// the Coordinator does while one is in flight.
type gatedStorage struct {
	refcount.Storage
	armed   atomic.Bool
	entered chan struct{}
	open    chan struct{}
	opened  sync.Once
	fail    atomic.Bool
}

// failNext makes the next write fail.
func (s *gatedStorage) failNext() { s.fail.Store(true) }

// release lets held and later writes through.
func (s *gatedStorage) release() {
	s.armed.Store(false)
	s.opened.Do(func() { close(s.open) })
}

func (s *gatedStorage) Commit(ctx context.Context, b *refcount.Batch) error {
	if s.fail.CompareAndSwap(true, false) {
		return errors.New("disk on fire")
	}
	if s.armed.Load() {
		s.entered <- struct{}{}
		<-s.open
	}
	return s.Storage.Commit(ctx, b)
}

// newGatedCoordinator returns a Coordinator whose reference writes go through a
// gatedStorage.
func newGatedCoordinator(t *testing.T) (*Coordinator, *gatedStorage) {
	t.Helper()
	store := &gatedStorage{Storage: refcount.NewMemoryStorage(), entered: make(chan struct{}), open: make(chan struct{})}
	c, err := NewCoordinator(DefaultConfig(), Options{Refs: refcount.NewManager(store)})
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	return c, store
}

// TestWaitersLearnOnceReferenceWritten: while the holder's reference is
// being written, no waiter is told anything; then the pull's waiter skips
// and the queued delete sees the puller.
func TestWaitersLearnOnceReferenceWritten(t *testing.T) {
	ctx := context.Background()
	c, store := newGatedCoordinator(t)
	members(t, c, "n1", "n2", "n3")
	p := mustLock(t, c, api.OperationPull, "n1")
	w := mustLock(t, c, api.OperationPull, "n2")
	wait := true
	d, err := c.Lock(ctx, api.LockRequest{Type: api.OperationDelete, ResourceID: blob, NodeID: "n3", Wait: &wait})
	dNode := "n3"
	require.NoError(t, err)
	require.True(t, w.Queued)
	require.True(t, d.Queued)
	sw, err := c.Subscribe(api.OperationPull, blob, w.Node, w.RequestID)
	require.NoError(t, err)
	t.Cleanup(sw.Close)
	sd, err := c.Subscribe(api.OperationDelete, blob, dNode, d.RequestID)
	require.NoError(t, err)
	t.Cleanup(sd.Close)

	t.Cleanup(store.release) // runs first: a failed check must not leave the write held
	store.armed.Store(true)
	unlocked := make(chan error, 1)
	go func() {
		_, err := c.Unlock(ctx, api.UnlockRequest{Type: api.OperationPull, ResourceID: blob, LeaseID: p.LeaseID, Success: true})
		unlocked <- err
	}()
	<-store.entered // the reference write is in flight, under the shard's mutex
	require.Empty(t, sw.Events(), "a waiter must not skip before the reference is written")
	require.Empty(t, sd.Events(), "the delete must not be decided before the puller's reference is written")

	store.release()
	require.NoError(t, <-unlocked)
	require.Equal(t, api.EventCompleted, receive(t, sw.Events()).Name)
	ev := receive(t, sd.Events())
	require.Equal(t, api.EventError, ev.Name)
	require.NotNil(t, ev.Error)
	require.Equal(t, api.CodeInUse, ev.Error.Code, "the delete sees the puller's reference")
	require.Equal(t, []string{"n1"}, ev.Error.Refs.Nodes)
}

func receive(t *testing.T, ch <-chan api.Event) api.Event {
	t.Helper()
	select {
	case ev, ok := <-ch:
		require.True(t, ok, "stream ended without an event")
		return ev
	case <-time.After(10 * time.Second):
		t.Fatal("no event within 10 s")
		return api.Event{}
	}
}

// TestFailedUnlockChangesNothing (docs/design.md §3.4): when the
// holder's reference cannot be written, the unlock answers 503 unavailable
// and changes nothing: the lock stays held, no waiter is told, no
// completion is recorded, and the coordinator is unready. The client's
// retry then records the reference, releases, and everyone skips.
// TestFailedDeleteUnlockChangesNothing: a delete's unlock whose write
// fails keeps the delete in flight: a queued pull is not started, a node
// that finds the (already trashed) blob is refused, nothing is completed;
// the retry applies it whole.
func TestFailedDeleteUnlockChangesNothing(t *testing.T) {
	ctx := context.Background()
	c, store := newGatedCoordinator(t)
	d := mustLock(t, c, api.OperationDelete, "n1")
	p := mustLock(t, c, api.OperationPull, "n2")
	require.True(t, p.Queued, "a pull waits for the delete")
	sp, err := c.Subscribe(api.OperationPull, blob, p.Node, p.RequestID)
	require.NoError(t, err)
	t.Cleanup(sp.Close)

	store.failNext()
	req := api.UnlockRequest{Type: api.OperationDelete, ResourceID: blob, LeaseID: d.LeaseID, Success: true}
	_, err = c.Unlock(ctx, req)
	require.ErrorIs(t, err, api.ErrUnavailable)
	require.Empty(t, sp.Events(), "the queued pull is not started")
	st, err := c.Status(ctx, api.OperationDelete, blob, "", "")
	require.NoError(t, err)
	require.NotNil(t, st.Holder, "the delete stays in flight")
	require.Nil(t, st.Completed)
	_, err = c.AddFoundRef(ctx, blob, "n3")
	require.ErrorIs(t, err, api.ErrDeleting, "no node may take up the blob meanwhile")

	_, err = c.Unlock(ctx, req)
	require.NoError(t, err, "the retry succeeds")
	require.Equal(t, api.EventGranted, receive(t, sp.Events()).Name, "then the pull starts")
	st, err = c.Status(ctx, api.OperationDelete, blob, "", "")
	require.NoError(t, err)
	require.Nil(t, st.Holder)
	require.NotNil(t, st.Completed)
	require.Equal(t, d.Fence, st.Completed.Fence, "the completion names the delete's fence (docs/design.md §8.11)")
	require.False(t, st.Completed.Lapsed)
	_, err = c.AddFoundRef(ctx, blob, "n3")
	require.ErrorIs(t, err, api.ErrDeleting, "a found blob is a stale view until a pull or reference follows")
}

func TestFailedUnlockChangesNothing(t *testing.T) {
	ctx := context.Background()
	c, store := newGatedCoordinator(t)
	members(t, c, "n1", "n2", "n3")
	p := mustLock(t, c, api.OperationPull, "n1")
	w := mustLock(t, c, api.OperationPull, "n2")
	sw, err := c.Subscribe(api.OperationPull, blob, w.Node, w.RequestID)
	require.NoError(t, err)
	t.Cleanup(sw.Close)

	store.failNext()
	req := api.UnlockRequest{Type: api.OperationPull, ResourceID: blob, LeaseID: p.LeaseID, Success: true}
	_, err = c.Unlock(ctx, req)
	require.ErrorIs(t, err, api.ErrUnavailable)
	require.ErrorContains(t, err, "disk on fire")
	require.Equal(t, api.CodeUnavailable, api.Code(err))
	require.Empty(t, sw.Events(), "no waiter is told anything")
	st, err := c.Status(ctx, api.OperationPull, blob, "", "")
	require.NoError(t, err)
	require.NotNil(t, st.Holder, "the lock stays held")
	require.Equal(t, "n1", st.Holder.NodeID)
	require.Empty(t, st.Holder.RequestID, "request IDs are shown only to their node")
	require.Nil(t, st.Completed, "no completion is recorded")
	require.Equal(t, 1, st.QueueLength)
	refs, err := c.Refs(ctx, blob)
	require.NoError(t, err)
	require.Empty(t, refs.Nodes)

	n3 := mustLock(t, c, api.OperationPull, "n3")
	require.True(t, n3.Queued, "a newcomer waits for the holder")
	s3, err := c.Subscribe(api.OperationPull, blob, n3.Node, n3.RequestID)
	require.NoError(t, err)
	t.Cleanup(s3.Close)

	_, err = c.Unlock(ctx, req)
	require.NoError(t, err, "the retry succeeds")
	require.NoError(t, c.Ready(ctx))
	require.Equal(t, api.EventCompleted, receive(t, sw.Events()).Name)
	require.Equal(t, api.EventCompleted, receive(t, s3.Events()).Name, "and the newcomer skips")
	refs, err = c.Refs(ctx, blob)
	require.NoError(t, err)
	require.Equal(t, []string{"n1"}, refs.Nodes)
	st, err = c.Status(ctx, api.OperationPull, blob, "", "")
	require.NoError(t, err)
	require.Nil(t, st.Holder)
}
