package lockserver

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sharedcontent/sharedcontent/lockserver/api"
)

// TestWaitQueueMatchesASlice drives a waitQueue and a plain slice with the
// same random pushes and removals (head, middle, tail) and compares every
// answer: length, lookups, front, order and every waiter's position.
func TestWaitQueueMatchesASlice(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var q waitQueue
	var want []*waiter
	next := 0
	for step := range 20000 {
		switch op := rng.IntN(10); {
		case op < 5 || len(want) == 0:
			w := &waiter{request: request{requestID: fmt.Sprint(next)}}
			next++
			q.Push(w)
			want = append(want, w)
		case op < 7:
			q.Remove(want[0])
			want = want[1:]
		default:
			i := rng.IntN(len(want))
			q.Remove(want[i])
			want = slices.Delete(want, i, i+1)
		}
		require.Equal(t, len(want), q.Len(), "step %d", step)
		if len(want) == 0 {
			require.Nil(t, q.Front())
			continue
		}
		require.Same(t, want[0], q.Front(), "step %d", step)
		if step%97 == 0 || len(want) < 8 {
			var got []*waiter
			q.Each(func(w *waiter) bool { got = append(got, w); return true })
			require.Equal(t, want, got, "step %d", step)
			for i, w := range want {
				require.Equal(t, i+1, q.Position(w), "step %d", step)
				require.Same(t, w, q.Get(w.nodeID, w.requestID))
			}
		}
	}
	q.Remove(&waiter{request: request{requestID: "not queued"}}) // no effect
	require.Equal(t, len(want), q.Len())
}

// TestStatusIsBounded (docs/design.md §10.3): with thousands of waiters on
// one key, a status answer lists only the head of the queue, counts them
// all, and gives the asking waiter its own position.
func TestStatusIsBounded(t *testing.T) {
	c := newTestCoordinator(t)
	ctx := context.Background()
	const n = 5000
	mustLock(t, c, api.OperationPull, "holder")
	var reqs []api.LockResponse
	for i := range n {
		resp, err := c.Lock(ctx, api.LockRequest{Type: api.OperationPull, ResourceID: blob, NodeID: fmt.Sprint("n", i), RequestID: fmt.Sprintf("r%d", i)})
		require.NoError(t, err)
		require.Equal(t, i+1, resp.Position)
		reqs = append(reqs, resp)
	}
	require.NoError(t, c.Cancel(ctx, api.CancelRequest{Type: api.OperationPull, ResourceID: blob, NodeID: "n10", RequestID: "r10"}))
	st, err := c.Status(ctx, api.OperationPull, blob, "n4000", "r4000")
	require.NoError(t, err)
	require.Len(t, st.Queue, api.StatusQueueHead)
	require.Equal(t, n-1, st.QueueLength)
	require.Equal(t, "n0", st.Queue[0].NodeID)
	require.Empty(t, st.Queue[0].RequestID, "request IDs are shown only to their own node")
	require.Equal(t, "n11", st.Queue[10].NodeID, "the cancelled waiter is gone")
	require.True(t, st.Request.Queued)
	require.Equal(t, 4000, st.Request.Position, "4000 ahead of it, less the cancelled one")
	again, err := c.Lock(ctx, api.LockRequest{Type: api.OperationPull, ResourceID: blob, NodeID: "n4000", RequestID: "r4000"})
	require.NoError(t, err)
	require.Equal(t, 4000, again.Position, "a retried Lock reports the same position")
}

// BenchmarkEnqueue is the cost of one /lock that queues (and its cancel,
// which keeps the queue's length) behind n waiters on one key. It must not
// grow with n.
func BenchmarkEnqueue(b *testing.B) {
	for _, n := range []int{1000, 10000, 100000} {
		b.Run(fmt.Sprint("waiters=", n), func(b *testing.B) {
			coord := newTestCoordinator(b, func(c *Config) { c.MaxWaitersPerNode = 1 << 30 })
			ctx := context.Background()
			if _, err := coord.Lock(ctx, api.LockRequest{Type: api.OperationPull, ResourceID: blob, NodeID: "holder"}); err != nil {
				b.Fatal(err)
			}
			for i := range n {
				if _, err := coord.Lock(ctx, api.LockRequest{Type: api.OperationPull, ResourceID: blob, NodeID: "n", RequestID: fmt.Sprintf("w%d", i)}); err != nil {
					b.Fatal(err)
				}
			}
			ids := make([]string, b.N)
			for i := range ids {
				ids[i] = fmt.Sprintf("b%d", i)
			}
			b.ResetTimer()
			for i := range b.N {
				resp, err := coord.Lock(ctx, api.LockRequest{Type: api.OperationPull, ResourceID: blob, NodeID: "n", RequestID: ids[i]})
				if err != nil || resp.Position != n+1 {
					b.Fatal(err, resp.Position)
				}
				if err := coord.Cancel(ctx, api.CancelRequest{Type: api.OperationPull, ResourceID: blob, NodeID: "n", RequestID: ids[i]}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkStatusPoll is the cost of a waiter's own status poll behind n
// waiters: it must not grow with n either.
func BenchmarkStatusPoll(b *testing.B) {
	for _, n := range []int{1000, 100000} {
		b.Run(fmt.Sprint("waiters=", n), func(b *testing.B) {
			coord := newTestCoordinator(b, func(c *Config) { c.MaxWaitersPerNode = 1 << 30 })
			ctx := context.Background()
			if _, err := coord.Lock(ctx, api.LockRequest{Type: api.OperationPull, ResourceID: blob, NodeID: "holder"}); err != nil {
				b.Fatal(err)
			}
			for i := range n {
				if _, err := coord.Lock(ctx, api.LockRequest{Type: api.OperationPull, ResourceID: blob, NodeID: "n", RequestID: fmt.Sprintf("w%d", i)}); err != nil {
					b.Fatal(err)
				}
			}
			last := fmt.Sprintf("w%d", n-1)
			b.ResetTimer()
			for range b.N {
				st, err := coord.Status(ctx, api.OperationPull, blob, "n", last)
				if err != nil || st.Request.Position != n {
					b.Fatal(err)
				}
			}
		})
	}
}
