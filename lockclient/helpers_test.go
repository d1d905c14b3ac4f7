package lockclient

import (
	"context"
	"fmt"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/valyala/fasthttp"

	"github.com/sharedcontent/sharedcontent/lockserver/api"
)

// testTimeout bounds every wait of a test: reaching it is a failure, never
// a synchronisation.
const testTimeout = 20 * time.Second

// testOptions make retries fast.
func testOptions(node string) []Option {
	return []Option{WithNodeID(node), WithRetryInterval(10 * time.Millisecond), WithPollInterval(20 * time.Millisecond)}
}

// newHTTPClient returns a Client of the server at url, closed when the test
// ends.
func newHTTPClient(t testing.TB, url, node string, opts ...Option) *Client {
	t.Helper()
	c, err := New(url, append(testOptions(node), opts...)...)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, c.Close()) })
	return c
}

// countingClient is the short-request client of a Client under test: it
// counts requests by "METHOD /path" and can act after each one.
type countingClient struct {
	base ShortClient
	// after, when set, runs after each request with that request's count
	// (1 for the first); set before use.
	after func(req *fasthttp.Request, n int, err error)

	mu     sync.Mutex
	counts map[string]int // protected by mu
}

// newCountingClient returns a counting client of the server at serverURL.
func newCountingClient(t testing.TB, serverURL string) *countingClient {
	t.Helper()
	u, err := url.Parse(serverURL)
	require.NoError(t, err)
	hc := newHostClient(u, nil)
	t.Cleanup(hc.CloseIdleConnections)
	return &countingClient{base: hc, counts: map[string]int{}}
}

func (c *countingClient) DoDeadline(req *fasthttp.Request, resp *fasthttp.Response, deadline time.Time) error {
	k := string(req.Header.Method()) + " " + string(req.URI().Path())
	c.mu.Lock()
	c.counts[k]++
	n := c.counts[k]
	c.mu.Unlock()
	err := c.base.DoDeadline(req, resp, deadline)
	if c.after != nil {
		c.after(req, n, err)
	}
	return err
}

func (c *countingClient) count(k string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.counts[k]
}

// outcome is what an asynchronous Lock returned.
type outcome struct {
	res *LockResult
	err error
}

// lockAsync runs c.Lock in a goroutine; the channel gets its outcome.
func lockAsync(ctx context.Context, c *Client, req api.LockRequest) <-chan outcome {
	ch := make(chan outcome, 1)
	go func() {
		res, err := c.Lock(ctx, req)
		ch <- outcome{res, err}
	}()
	return ch
}

// recv waits for an outcome; taking longer than testTimeout fails the test.
func recv(t testing.TB, ch <-chan outcome) outcome {
	t.Helper()
	select {
	case o := <-ch:
		return o
	case <-time.After(testTimeout):
		t.Fatal("Lock did not return")
		return outcome{}
	}
}

// signalled waits for a signal on ch; taking longer than testTimeout fails
// the test.
func signalled(t testing.TB, ch <-chan struct{}) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(testTimeout):
		t.Fatal("no signal")
	}
}

// requireWaiting asserts that ch has no outcome yet.
func requireWaiting(t testing.TB, ch <-chan outcome, who string) {
	t.Helper()
	select {
	case o := <-ch:
		t.Fatalf("%s returned while it should still wait: %+v, %v", who, o.res, o.err)
	default:
	}
}

// status returns the state of (typ, id) as c sees it.
func status(t testing.TB, c *Client, typ api.OperationType, id string) *api.StatusResponse {
	t.Helper()
	st, err := c.Status(context.Background(), typ, id)
	require.NoError(t, err)
	return st
}

func queueNodes(st *api.StatusResponse) []string {
	nodes := make([]string, 0, len(st.Queue))
	for _, w := range st.Queue {
		nodes = append(nodes, w.NodeID)
	}
	return nodes
}

// waitQueue waits until the queue of (typ, id) holds exactly nodes, in
// order.
func waitQueue(t testing.TB, c *Client, typ api.OperationType, id string, nodes ...string) {
	t.Helper()
	require.Eventually(t, func() bool {
		return fmt.Sprint(queueNodes(status(t, c, typ, id))) == fmt.Sprint(nodes)
	}, testTimeout, 2*time.Millisecond, "queue of %s:%s never became %v", typ, id, nodes)
}
