package lockclient

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sharedcontent/sharedcontent/internal/testutil/members"
	"github.com/sharedcontent/sharedcontent/lockserver/api"
	"github.com/sharedcontent/sharedcontent/lockserver/lockservertest"
)

// streamsOpen reads sharedcontent_event_streams_open{kind} from the
// coordinator's /metrics.
func streamsOpen(t testing.TB, url, kind string) int {
	t.Helper()
	resp, err := http.Get(url + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	want := `sharedcontent_event_streams_open{kind="` + kind + `"} `
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), want); ok {
			n, err := strconv.Atoi(v)
			require.NoError(t, err)
			return n
		}
	}
	require.NoError(t, sc.Err())
	t.Fatalf("no %s in /metrics", want)
	return 0
}

// TestNodeStreamCarriesAllWaits (docs/design.md §10.1): a node with 50 requests queued on one key holds exactly one event
// stream, and the 50 are granted in queue order as each releases.
func TestNodeStreamCarriesAllWaits(t *testing.T) {
	ts := lockservertest.Start(t)
	holder := newHTTPClient(t, ts.URL(), "node-a")
	waiter := newHTTPClient(t, ts.URL(), "node-b")
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	req := api.LockRequest{Type: api.OperationUpdate, ResourceID: blob}
	held, err := holder.Lock(ctx, req)
	require.NoError(t, err)
	require.True(t, held.Acquired)

	const waits = 50
	granted := make(chan int, waits)
	failed := make(chan error, waits)   // a wait that failed
	unlocked := make(chan error, waits) // each grant's unlock
	for i := range waits {
		go func() {
			res, err := waiter.Lock(ctx, req)
			if err == nil && !res.Acquired {
				err = fmt.Errorf("wait %d: not acquired: %+v", i, res)
			}
			if err != nil {
				failed <- err
				return
			}
			granted <- i
			unlocked <- waiter.Unlock(ctx, res.Lease, true, nil)
		}()
		// The next wait queues behind this one.
		require.Eventually(t, func() bool { return status(t, holder, req.Type, blob).QueueLength == i+1 },
			testTimeout, time.Millisecond, "wait %d never queued", i)
	}
	require.Eventually(t, func() bool { return ts.Core().NodeStreams() == 1 }, testTimeout, time.Millisecond)
	require.Equal(t, 1, streamsOpen(t, ts.URL(), "node"), "one stream carries the 50 waits")
	require.Zero(t, streamsOpen(t, ts.URL(), "request"))

	require.NoError(t, holder.Unlock(ctx, held.Lease, true, nil))
	for i := range waits {
		select {
		case got := <-granted:
			require.Equal(t, i, got, "granted in queue order")
			require.NoError(t, <-unlocked)
		case err := <-failed:
			require.NoError(t, err)
		case <-ctx.Done():
			t.Fatalf("only %d of %d waits were granted", i, waits)
		}
	}
	require.Equal(t, 1, streamsOpen(t, ts.URL(), "node"), "the stream lingers for the next wait")
}

// TestNodeStreamDropLosesNoWait: the node's stream (and every other
// connection of the node) is cut while 20 requests wait and the holder
// releases their locks, some while no stream is open; every wait still
// gets its grant, over a new stream.
func TestNodeStreamDropLosesNoWait(t *testing.T) {
	ts := lockservertest.Start(t)
	px := startProxy(t, ts.Addr(), func(*http.Request, int) proxyAction { return forward })
	holder := newHTTPClient(t, ts.URL(), "node-a")
	waiter := newHTTPClient(t, px.url, "node-b")
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()

	const waits = 20
	var held []*LockResult
	var outcomes []<-chan outcome
	for i := range waits {
		req := api.LockRequest{Type: api.OperationUpdate, ResourceID: fmt.Sprintf("%s-%d", blob, i)}
		res, err := holder.Lock(ctx, req)
		require.NoError(t, err)
		held = append(held, res)
		outcomes = append(outcomes, lockAsync(ctx, waiter, req))
		waitQueue(t, holder, req.Type, req.ResourceID, "node-b")
	}
	require.Eventually(t, func() bool { return ts.Core().NodeStreams() == 1 }, testTimeout, time.Millisecond)

	px.closeConns() // the stream drops
	for _, res := range held {
		require.NoError(t, holder.Unlock(ctx, res.Lease, true, nil))
	}
	for i, ch := range outcomes {
		o := recv(t, ch)
		require.NoError(t, o.err, "wait %d", i)
		require.True(t, o.res.Acquired, "wait %d", i)
		require.NoError(t, waiter.Unlock(ctx, o.res.Lease, true, nil))
	}
	require.GreaterOrEqual(t, px.count("GET /lock/events"), 2, "the stream was opened again")
	require.Zero(t, px.count("GET /lock/subscribe"), "no wait needed a stream of its own")
}

// TestNodeStreamRefusedFallsBack: a coordinator that does not serve
// /lock/events (an older one) leaves each wait on a stream of its own.
func TestNodeStreamRefusedFallsBack(t *testing.T) {
	ts := lockservertest.Start(t)
	px := startProxy(t, ts.Addr(), func(r *http.Request, _ int) proxyAction {
		if r.URL.Path == "/lock/events" {
			return badGateway
		}
		return forward
	})
	holder := newHTTPClient(t, ts.URL(), "node-a")
	waiter := newHTTPClient(t, px.url, "node-b")
	members.Open(t, ts.Core(), "node-a", "node-b")
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	req := api.LockRequest{Type: api.OperationPull, ResourceID: blob}
	held, err := holder.Lock(ctx, req)
	require.NoError(t, err)
	ch := lockAsync(ctx, waiter, req)
	require.Eventually(t, func() bool { return px.count("GET /lock/subscribe") == 1 }, testTimeout, time.Millisecond)
	require.NoError(t, holder.Unlock(ctx, held.Lease, false, nil))
	o := recv(t, ch)
	require.NoError(t, o.err)
	require.True(t, o.res.Acquired)
	require.Equal(t, 1, px.count("GET /lock/events"))
	require.NoError(t, waiter.Unlock(ctx, o.res.Lease, true, nil))
}
