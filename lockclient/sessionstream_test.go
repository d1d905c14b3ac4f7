package lockclient

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sharedcontent/sharedcontent/internal/testutil/members"
	"github.com/sharedcontent/sharedcontent/lockserver/api"
	"github.com/sharedcontent/sharedcontent/lockserver/lockservertest"
)

// TestSessionOpensNodeStream (docs/design.md §10.6): with
// WithSessionStream, a node's session opens its event stream before any
// wait, so that its first wait is registered on a live stream and woken
// there, without /lock/status; the end of the session closes it. A client
// without it opens none with its session.
func TestSessionOpensNodeStream(t *testing.T) {
	ts := lockservertest.Start(t)
	px := startProxy(t, ts.Addr(), func(*http.Request, int) proxyAction { return forward })
	holder := newHTTPClient(t, ts.URL(), "node-a")
	waiter := newHTTPClient(t, px.url, "node-b", WithSessionStream())
	onDemand := newHTTPClient(t, ts.URL(), "node-c")
	members.Open(t, ts.Core(), "node-a")
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()

	_, err := onDemand.Session(ctx, api.SessionRequest{InstanceID: "c1"})
	require.NoError(t, err)
	_, err = waiter.Session(ctx, api.SessionRequest{InstanceID: "b1"})
	require.NoError(t, err)
	require.Eventually(t, func() bool { return ts.Core().NodeStreams() >= 1 }, testTimeout, time.Millisecond)
	require.Eventually(t, func() bool { return waiter.http.nodeStreamFor("node-b").isLive() }, testTimeout, time.Millisecond)
	require.Equal(t, 1, ts.Core().NodeStreams(), "only the session that holds its stream has one")
	require.Equal(t, 1, px.count("GET /lock/events"))

	req := api.LockRequest{Type: api.OperationPull, ResourceID: blob}
	held, err := holder.Lock(ctx, req)
	require.NoError(t, err)
	require.True(t, held.Acquired)
	ch := lockAsync(ctx, waiter, req)
	waitQueue(t, holder, req.Type, req.ResourceID, "node-b")
	require.NoError(t, holder.Unlock(ctx, held.Lease, true, nil))
	o := recv(t, ch)
	require.NoError(t, o.err)
	require.True(t, o.res.Skipped, "the holder succeeded: the waiter skips")
	require.Zero(t, px.count("GET /lock/status"), "the waiter learned its outcome on the stream its session opened")
	require.Equal(t, 1, px.count("GET /lock/events"), "the wait used the session's stream")

	_, err = waiter.EndSession(ctx, "b1")
	require.NoError(t, err)
	require.Eventually(t, func() bool { return ts.Core().NodeStreams() == 0 }, testTimeout, time.Millisecond)
}

// isLive reports whether the stream has delivered its first event.
func (ns *nodeStream) isLive() bool {
	ns.mu.Lock()
	defer ns.mu.Unlock()
	return ns.live
}
