package lockclient

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sharedcontent/sharedcontent/internal/testutil/members"
	"github.com/sharedcontent/sharedcontent/lockserver/api"
	"github.com/sharedcontent/sharedcontent/lockserver/lockservertest"
)

// TestLostResponseGetsSameGrant: a proxy swallows the answer to the first
// POST /lock after the server granted it. The retry, with the same request
// ID, gets that same grant instead of queuing behind itself.
func TestLostResponseGetsSameGrant(t *testing.T) {
	ts := lockservertest.Start(t)
	px := startProxy(t, ts.Addr(), func(r *http.Request, n int) proxyAction {
		if r.Method == http.MethodPost && r.URL.Path == "/lock" && n == 1 {
			return dropResponse
		}
		return forward
	})
	c := newHTTPClient(t, px.url, "node-a")
	members.Open(t, ts.Core(), "node-a")
	res, err := c.Lock(context.Background(), api.LockRequest{Type: api.OperationPull, ResourceID: blob})
	require.NoError(t, err)
	require.True(t, res.Acquired)
	require.Equal(t, 2, px.count("POST /lock"))

	dropped := px.droppedBodies()
	require.Len(t, dropped, 1)
	var first api.LockResponse
	require.NoError(t, json.Unmarshal(dropped[0], &first))
	require.True(t, first.Acquired, "the server had granted the lost request")
	require.Equal(t, first.LeaseID, res.Lease.ID)
	require.Equal(t, first.Fence, res.Lease.Fence)

	st, err := ts.Core().Status(context.Background(), api.OperationPull, blob, "node-a", "")
	require.NoError(t, err)
	require.Equal(t, first.RequestID, st.Holder.RequestID)
	require.Equal(t, first.Fence, st.Holder.Fence)
	require.Empty(t, st.Queue, "no self-queueing")
	require.NoError(t, c.Unlock(context.Background(), res.Lease, true, nil))
}

// TestWaitUsesEventStream: through a transparent proxy, a waiter that
// waits with a stream per request (as clients did before the node stream,
// which coordinators still serve) learns of its turn from /lock/subscribe
// and never polls.
func TestWaitUsesEventStream(t *testing.T) {
	ts := lockservertest.Start(t)
	px := startProxy(t, ts.Addr(), func(*http.Request, int) proxyAction { return forward })
	holder := newHTTPClient(t, ts.URL(), "node-a")
	waiter := newHTTPClient(t, px.url, "node-b")
	members.Open(t, ts.Core(), "node-a", "node-b")
	waiter.http.perRequestStreams = true
	req := api.LockRequest{Type: api.OperationPull, ResourceID: blob}

	resA, err := holder.Lock(context.Background(), req)
	require.NoError(t, err)
	ch := lockAsync(context.Background(), waiter, req)
	waitQueue(t, holder, req.Type, req.ResourceID, "node-b")
	require.NoError(t, holder.Unlock(context.Background(), resA.Lease, false, nil))
	o := recv(t, ch)
	require.NoError(t, o.err)
	require.True(t, o.res.Acquired)
	require.Equal(t, 1, px.count("GET /lock/subscribe"))
	require.Zero(t, px.count("GET /lock/events"))
	require.Zero(t, px.count("GET /lock/status"))
	require.NoError(t, waiter.Unlock(context.Background(), o.res.Lease, true, nil))
}

// TestPollingFallback: a proxy that refuses /lock/subscribe (by closing the
// connection, or with a 502) leaves polling /lock/status, which still gets
// the waiter its skip or its grant.
func TestPollingFallback(t *testing.T) {
	for _, refusal := range []struct {
		name   string
		action proxyAction
	}{{"closed", closeConn}, {"502", badGateway}} {
		for _, success := range []bool{true, false} {
			name := refusal.name + "/skip"
			if !success {
				name = refusal.name + "/grant"
			}
			t.Run(name, func(t *testing.T) {
				ts := lockservertest.Start(t)
				px := startProxy(t, ts.Addr(), func(r *http.Request, _ int) proxyAction {
					if r.URL.Path == "/lock/subscribe" {
						return refusal.action
					}
					return forward
				})
				holder := newHTTPClient(t, ts.URL(), "node-a")
				waiter := newHTTPClient(t, px.url, "node-b")
				members.Open(t, ts.Core(), "node-a", "node-b")
				waiter.http.perRequestStreams = true
				req := api.LockRequest{Type: api.OperationPull, ResourceID: blob}

				resA, err := holder.Lock(context.Background(), req)
				require.NoError(t, err)
				ch := lockAsync(context.Background(), waiter, req)
				waitQueue(t, holder, req.Type, req.ResourceID, "node-b")
				// Wait until the waiter is polling, so the outcome reaches it
				// that way.
				require.Eventually(t, func() bool { return px.count("GET /lock/status") > 0 }, testTimeout, 2*time.Millisecond)
				require.NoError(t, holder.Unlock(context.Background(), resA.Lease, success, nil))

				o := recv(t, ch)
				require.NoError(t, o.err)
				require.GreaterOrEqual(t, px.count("GET /lock/subscribe"), 1)
				if success {
					require.True(t, o.res.Skipped)
					return
				}
				require.True(t, o.res.Acquired)
				require.Greater(t, o.res.Lease.Fence, resA.Lease.Fence)
				st := status(t, holder, req.Type, req.ResourceID)
				require.Equal(t, "node-b", st.Holder.NodeID)
				require.True(t, st.Holder.Claimed, "the poll claimed the grant")
				require.NoError(t, waiter.Unlock(context.Background(), o.res.Lease, true, nil))
			})
		}
	}
}

// TestStreamDropResubscribes: the proxy cuts the first event stream after
// its first event; the waiter subscribes again (re-queueing if the server
// dropped it) and still gets the grant.
func TestStreamDropResubscribes(t *testing.T) {
	ts := lockservertest.Start(t)
	px := startProxy(t, ts.Addr(), func(*http.Request, int) proxyAction { return forward })
	holder := newHTTPClient(t, ts.URL(), "node-a")
	waiter := newHTTPClient(t, px.url, "node-b")
	members.Open(t, ts.Core(), "node-a", "node-b")
	waiter.http.perRequestStreams = true
	queued := make(chan struct{}, 4)
	waiter.http.onQueued = func(api.LockRequest) { queued <- struct{}{} }
	req := api.LockRequest{Type: api.OperationPull, ResourceID: blob}

	resA, err := holder.Lock(context.Background(), req)
	require.NoError(t, err)
	ch := lockAsync(context.Background(), waiter, req)
	signalled(t, queued)
	px.closeConns()      // cut the stream
	signalled(t, queued) // subscribed again
	requireWaiting(t, ch, "node-b")
	// Two streams, or three when the server had already dropped the waiter
	// with the first one and the second found it forgotten.
	require.GreaterOrEqual(t, px.count("GET /lock/subscribe"), 2)
	waitQueue(t, holder, req.Type, req.ResourceID, "node-b")

	require.NoError(t, holder.Unlock(context.Background(), resA.Lease, false, nil))
	o := recv(t, ch)
	require.NoError(t, o.err)
	require.True(t, o.res.Acquired)
	require.Zero(t, px.count("GET /lock/status"), "a dropped stream is not a reason to poll")
	require.NoError(t, waiter.Unlock(context.Background(), o.res.Lease, true, nil))
}

// TestWaitsReuseConnections: a wait that ends in a grant or a skip reads
// its event stream to the end, so the next request reuses the connection
// instead of dialing a new one.
func TestWaitsReuseConnections(t *testing.T) {
	ts := lockservertest.Start(t)
	holder := newHTTPClient(t, ts.URL(), "holder")
	waiter := newHTTPClient(t, ts.URL(), "waiter")
	members.Open(t, ts.Core(), "holder", "waiter")
	queued := make(chan struct{}, 1)
	waiter.http.onQueued = func(api.LockRequest) { queued <- struct{}{} }
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()

	const rounds = 20
	for i := range rounds {
		// Even rounds hand the update lock over (granted), odd rounds
		// complete a pull (skipped).
		req := api.LockRequest{Type: api.OperationUpdate, ResourceID: blob}
		if i%2 == 1 {
			req = api.LockRequest{Type: api.OperationPull, ResourceID: fmt.Sprintf("%s-%d", blob, i)}
		}
		held, err := holder.Lock(ctx, req)
		require.NoError(t, err)
		require.True(t, held.Acquired)
		got := make(chan *LockResult, 1)
		go func() {
			res, err := waiter.Lock(ctx, req)
			require.NoError(t, err)
			got <- res
		}()
		select {
		case <-queued:
		case <-ctx.Done():
			t.Fatal("the waiter never queued")
		}
		require.NoError(t, holder.Unlock(ctx, held.Lease, true, nil))
		res := <-got
		if req.Type == api.OperationUpdate {
			require.True(t, res.Acquired, "round %d: the update lock was handed over", i)
			require.NoError(t, waiter.Unlock(ctx, res.Lease, true, nil))
		} else {
			require.True(t, res.Skipped, "round %d: the pull completed elsewhere", i)
		}
	}
	// One connection for each client's requests and one for the waiter's
	// streams; a dropped stream connection would make one per round.
	require.LessOrEqual(t, ts.Accepted(), int64(4), "connections for %d waits", rounds)
}
