package lockclient

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/valyala/fasthttp"

	"github.com/sharedcontent/sharedcontent/internal/testutil/members"
	"github.com/sharedcontent/sharedcontent/lockserver/api"
	"github.com/sharedcontent/sharedcontent/lockserver/httpserver"
	"github.com/sharedcontent/sharedcontent/lockserver/lockservertest"
)

// TestRetryUntilServerUp: the coordinator is down (connections refused)
// for the first two attempts and comes up; the third attempt acquires.
func TestRetryUntilServerUp(t *testing.T) {
	addr := lockservertest.FreeAddr(t)
	ct := newCountingClient(t, "http://"+addr)
	var (
		mu       sync.Mutex
		failures []error
		server   *lockservertest.Server
	)
	ct.after = func(req *fasthttp.Request, n int, err error) {
		if string(req.URI().Path()) != "/lock" {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			failures = append(failures, err)
		}
		if n == 2 {
			// The second attempt has just failed: bring the server up
			// before the client retries.
			server = lockservertest.Start(t, lockservertest.WithAddr(addr))
		}
	}
	c := newHTTPClient(t, "http://"+addr, "node-a", WithMaxRetries(3), WithShortClient(ct))

	res, err := c.Lock(context.Background(), api.LockRequest{Type: api.OperationPull, ResourceID: blob})
	require.NoError(t, err)
	require.True(t, res.Acquired)
	require.Equal(t, 3, ct.count("POST /lock"), "two refused attempts, then the one that acquired")
	mu.Lock()
	require.Len(t, failures, 2)
	members.Open(t, server.Core(), "node-a")
	mu.Unlock()
	require.NoError(t, c.Unlock(context.Background(), res.Lease, true, nil))
}

// TestRetryGivesUp: a server that never comes up costs 1+MaxRetries
// attempts, and the error says unavailable.
func TestRetryGivesUp(t *testing.T) {
	down := "http://" + lockservertest.FreeAddr(t)
	ct := newCountingClient(t, down)
	c := newHTTPClient(t, down, "node-a", WithMaxRetries(2), WithShortClient(ct))
	res, err := c.Lock(context.Background(), api.LockRequest{Type: api.OperationPull, ResourceID: blob})
	require.ErrorIs(t, err, api.ErrUnavailable)
	require.Equal(t, err, res.Error)
	require.Equal(t, 3, ct.count("POST /lock"))

	_, err = c.Refs(context.Background(), blob)
	require.ErrorIs(t, err, api.ErrUnavailable)
	require.Equal(t, 3, ct.count("GET /refs"))
}

// TestRetry5xx: 5xx answers (the server's own 503 and a proxy's 502 page)
// are retried; the attempt after them acquires.
func TestRetry5xx(t *testing.T) {
	l := lockservertest.NewCoordinator(t)
	inner := httpserver.NewHandler(l)
	var locks atomic.Int32
	url := lockservertest.ServeHandler(t, inner, func(next fasthttp.RequestHandler) fasthttp.RequestHandler {
		return func(ctx *fasthttp.RequestCtx) {
			if string(ctx.Path()) == "/lock" {
				switch locks.Add(1) {
				case 1:
					ctx.SetContentType("application/json")
					ctx.SetStatusCode(http.StatusServiceUnavailable)
					ctx.SetBodyString(`{"error":"server is shutting down","code":"unavailable"}`)
					return
				case 2:
					ctx.SetStatusCode(http.StatusBadGateway)
					ctx.SetBodyString("<html>bad gateway</html>")
					return
				}
			}
			next(ctx)
		}
	})
	c := newHTTPClient(t, url, "node-a", WithMaxRetries(3))
	res, err := c.Lock(context.Background(), api.LockRequest{Type: api.OperationPull, ResourceID: blob})
	require.NoError(t, err)
	require.True(t, res.Acquired)
	require.EqualValues(t, 3, locks.Load())
	st, err := l.Status(context.Background(), api.OperationPull, blob, "", "")
	require.NoError(t, err)
	require.Equal(t, "node-a", st.Holder.NodeID)
}

// TestNoRetryOn4xx: refusals are returned at once, typed, after exactly one
// attempt.
func TestNoRetryOn4xx(t *testing.T) {
	ts := lockservertest.Start(t, lockservertest.WithToken("s3cret"))
	members.Open(t, ts.Core(), "other")
	_, err := ts.Core().AddRef(context.Background(), blob+"-used", "other")
	require.NoError(t, err)
	held, err := ts.Core().Lock(context.Background(), api.LockRequest{Type: api.OperationPull, ResourceID: blob, NodeID: "other"})
	require.NoError(t, err)
	require.True(t, held.Acquired)

	for _, tc := range []struct {
		name  string
		token string
		try   bool
		req   api.LockRequest
		want  error
	}{
		{"in use", "s3cret", false, api.LockRequest{Type: api.OperationDelete, ResourceID: blob + "-used"}, api.ErrInUse},
		{"locked", "s3cret", true, api.LockRequest{Type: api.OperationPull, ResourceID: blob}, api.ErrLocked},
		{"unauthorized", "wrong", false, api.LockRequest{Type: api.OperationPull, ResourceID: blob + "-other"}, api.ErrUnauthorized},
		{"invalid", "s3cret", false, api.LockRequest{Type: api.OperationPull, ResourceID: "sha256:\x07bell"}, api.ErrInvalidArgument},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ct := newCountingClient(t, ts.URL())
			c := newHTTPClient(t, ts.URL(), "node-a", WithMaxRetries(3), WithBearerToken(tc.token+"\n"), WithShortClient(ct))
			lock := c.Lock
			if tc.try {
				lock = c.TryLock
			}
			res, err := lock(context.Background(), tc.req)
			require.ErrorIs(t, err, tc.want)
			require.Equal(t, err, res.Error)
			require.Equal(t, 1, ct.count("POST /lock"), "a refusal is not retried")
			for _, other := range []error{api.ErrInUse, api.ErrLocked, api.ErrUnauthorized, api.ErrInvalidArgument, api.ErrUnavailable} {
				if other != tc.want {
					require.False(t, errors.Is(err, other), "%v also matches %v", err, other)
				}
			}
		})
	}

	// The right token (read from a file, newline and all) is accepted.
	c := newHTTPClient(t, ts.URL(), "node-a", WithBearerToken("s3cret\n"))
	members.Open(t, ts.Core(), "node-a")
	res, err := c.Lock(context.Background(), api.LockRequest{Type: api.OperationPull, ResourceID: blob + "-other"})
	require.NoError(t, err)
	require.True(t, res.Acquired)
	require.NoError(t, c.Unlock(context.Background(), res.Lease, true, nil))
}

// TestRetryWaitHonoursContext: a Lock whose context ends between attempts
// stops at once instead of sleeping through the retry interval.
func TestRetryWaitHonoursContext(t *testing.T) {
	down := "http://" + lockservertest.FreeAddr(t)
	ct := newCountingClient(t, down)
	ctx, cancel := context.WithCancel(context.Background())
	ct.after = func(_ *fasthttp.Request, n int, _ error) {
		if n == 1 {
			cancel()
		}
	}
	c := newHTTPClient(t, down, "node-a", WithMaxRetries(3), WithRetryInterval(time.Hour), WithShortClient(ct))
	res, err := c.Lock(ctx, api.LockRequest{Type: api.OperationPull, ResourceID: blob})
	require.ErrorIs(t, err, context.Canceled)
	require.Equal(t, err, res.Error)
	require.Equal(t, 1, ct.count("POST /lock"))
}

// TestRetryPausesAreJittered: pauses spread over [d/2, 3d/2), so clients
// cut off together do not retry together.
func TestRetryPausesAreJittered(t *testing.T) {
	const d = time.Second
	seen := make(map[time.Duration]bool)
	lo, hi := d, d
	for range 1000 {
		p := jitter(d)
		require.GreaterOrEqual(t, p, d/2)
		require.Less(t, p, 3*d/2)
		seen[p] = true
		lo, hi = min(lo, p), max(hi, p)
	}
	require.Greater(t, len(seen), 990, "pauses must differ")
	// Each bound fails with probability 0.9^1000.
	require.Less(t, lo, 6*d/10)
	require.Greater(t, hi, 14*d/10)
}
