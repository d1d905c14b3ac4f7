package httpserver

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sharedcontent/sharedcontent/lockserver/api"
)

// TestStreamLimits (docs/design.md §10.3): event streams are bounded per IP
// and in all; one over a bound gets 429 too_many_requests with
// Retry-After, and once a stream ends a new one is served again.
func TestStreamLimits(t *testing.T) {
	l := newTestCoordinator(t)
	base := serveHandler(t, NewHandler(l, WithStreamLimits(3, 2, 100)))
	addr := strings.TrimPrefix(base, "http://")
	mustLock(t, l, api.OperationPull, "holder")
	n := 0
	// subscribe queues a new request and opens its stream from ip.
	subscribe := func(ip string) (*http.Response, net.Conn) {
		t.Helper()
		n++
		resp := mustLock(t, l, api.OperationPull, fmt.Sprint("n", n))
		require.True(t, resp.Queued)
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
		c, err := d.Dial("tcp", addr)
		require.NoError(t, err)
		t.Cleanup(func() { c.Close() })
		q := url.Values{"type": {"pull"}, "resource_id": {blob}, "node_id": {resp.Node}, "request_id": {resp.RequestID}}
		require.NoError(t, c.SetDeadline(time.Now().Add(10*time.Second)))
		_, err = io.WriteString(c, "GET /lock/subscribe?"+q.Encode()+" HTTP/1.1\r\nHost: x\r\n\r\n")
		require.NoError(t, err)
		r, err := http.ReadResponse(bufio.NewReader(c), nil)
		require.NoError(t, err)
		return r, c
	}
	open := func(ip string) net.Conn {
		t.Helper()
		r, c := subscribe(ip)
		require.Equal(t, http.StatusOK, r.StatusCode)
		require.Equal(t, "text/event-stream", r.Header.Get("Content-Type"))
		return c
	}
	refused := func(ip, what string) {
		t.Helper()
		r, _ := subscribe(ip)
		defer r.Body.Close()
		b, err := io.ReadAll(r.Body)
		require.NoError(t, err)
		require.Equal(t, http.StatusTooManyRequests, r.StatusCode, string(b))
		require.Equal(t, "1", r.Header.Get("Retry-After"))
		require.Contains(t, string(b), api.CodeTooManyRequests)
		require.Contains(t, string(b), what)
	}

	first := open("127.0.0.1")
	open("127.0.0.1")
	refused("127.0.0.1", "per-IP limit")
	open("127.0.0.2")
	refused("127.0.0.3", "(the limit)")

	first.Close() // its waiter leaves the queue, and its stream ends
	require.Eventually(t, func() bool {
		r, c := subscribe("127.0.0.3")
		defer c.Close()
		return r.StatusCode == http.StatusOK
	}, 10*time.Second, 10*time.Millisecond, "a stream is served again once one has ended")
}
