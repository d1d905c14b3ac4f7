package httpserver

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sharedcontent/sharedcontent/internal/testutil/members"
	"github.com/sharedcontent/sharedcontent/lockserver"
	"github.com/sharedcontent/sharedcontent/lockserver/api"
)

// rawConn is one client connection that speaks HTTP/1.1 by hand, so that a
// test controls what goes on the wire: pipelining, HTTP/1.0, Connection:
// close.
type rawConn struct {
	net.Conn
	r *bufio.Reader
}

func dialRaw(t *testing.T, base string) *rawConn {
	t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	// A test fails instead of hanging when the server stops answering.
	require.NoError(t, c.SetDeadline(time.Now().Add(10*time.Second)))
	return &rawConn{Conn: c, r: bufio.NewReader(c)}
}

// send writes the requests in one write.
func (c *rawConn) send(t *testing.T, reqs ...string) {
	t.Helper()
	_, err := io.WriteString(c, strings.Join(reqs, ""))
	require.NoError(t, err)
}

// response reads one response and its whole body.
func (c *rawConn) response(t *testing.T) (*http.Response, string) {
	t.Helper()
	resp, err := http.ReadResponse(c.r, nil)
	require.NoError(t, err)
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp, string(b)
}

func subscribeReq(requestID string, headers ...string) string {
	return "GET /lock/subscribe?type=pull&resource_id=" + blob + "&node_id=n2&request_id=" + requestID + " HTTP/1.1\r\nHost: lock\r\n" +
		strings.Join(headers, "") + "\r\n"
}

const healthzReq = "GET /healthz HTTP/1.1\r\nHost: lock\r\n\r\n"

// TestStreamGivesConnectionBack: after an event stream, the connection
// serves the client's next requests, also when the client sent them
// before the stream ended (pipelining), round after round.
func TestStreamGivesConnectionBack(t *testing.T) {
	ts := startServer(t, t.TempDir())
	c := dialRaw(t, ts.url)
	for i := range 4 {
		// An unknown request gets its state, and the stream ends.
		if i%2 == 0 {
			c.send(t, subscribeReq("unknown"))
		} else {
			c.send(t, subscribeReq("unknown"), healthzReq)
		}
		resp, body := c.response(t)
		require.Equal(t, 200, resp.StatusCode)
		require.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))
		require.Equal(t, []string{"chunked"}, resp.TransferEncoding)
		require.False(t, resp.Close)
		require.True(t, strings.HasPrefix(body, "event: state\ndata: {"), body)
		if i%2 == 0 {
			c.send(t, healthzReq)
		}
		resp, body = c.response(t)
		require.Equal(t, 200, resp.StatusCode, "round %d", i)
		require.Equal(t, "ok\n", body)
	}
}

// TestStreamPipelinedRequestWaits: a request the client sends while its
// stream is open is not taken for the client going: the waiter stays
// queued, gets its outcome, and the request is answered after the stream.
func TestStreamPipelinedRequestWaits(t *testing.T) {
	ts := startServer(t, t.TempDir())
	members.Open(t, ts.Coordinator, "n1", "n2")
	ctx := context.Background()
	held, err := ts.Coordinator.Lock(ctx, api.LockRequest{Type: api.OperationPull, ResourceID: blob, NodeID: "n1"})
	require.NoError(t, err)
	q, err := ts.Coordinator.Lock(ctx, api.LockRequest{Type: api.OperationPull, ResourceID: blob, NodeID: "n2", RequestID: "rb"})
	require.NoError(t, err)
	require.True(t, q.Queued)

	c := dialRaw(t, ts.url)
	c.send(t, subscribeReq("rb"))
	resp, err := http.ReadResponse(c.r, nil)
	require.NoError(t, err)
	events := bufio.NewReader(resp.Body)
	line, err := events.ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "event: state\n", line)

	c.send(t, healthzReq)
	_, err = ts.Coordinator.Unlock(ctx, api.UnlockRequest{Type: api.OperationPull, ResourceID: blob, LeaseID: held.LeaseID, Success: true})
	require.NoError(t, err)
	rest, err := io.ReadAll(events)
	require.NoError(t, err)
	require.Contains(t, string(rest), "event: completed\n", "the waiter stayed in its queue")

	resp, body := c.response(t)
	require.Equal(t, 200, resp.StatusCode)
	require.Equal(t, "ok\n", body)
}

// TestStreamConnectionClose: a client that asks to close gets its stream,
// then the server closes the connection.
func TestStreamConnectionClose(t *testing.T) {
	ts := startServer(t, t.TempDir())
	c := dialRaw(t, ts.url)
	c.send(t, subscribeReq("unknown", "Connection: close\r\n"))
	resp, body := c.response(t)
	require.Equal(t, 200, resp.StatusCode)
	require.True(t, resp.Close)
	require.Contains(t, body, "event: state\n")
	_, err := c.r.ReadByte()
	require.ErrorIs(t, err, io.EOF)
}

// TestStreamRefusesBody: a subscription with a body is refused, and the
// connection closed: the body would otherwise be read as the next request.
func TestStreamRefusesBody(t *testing.T) {
	ts := startServer(t, t.TempDir())
	for _, req := range []string{
		subscribeReq("unknown", "Content-Length: 17\r\n") + "GET /x HTTP/1.1\r\n",
		subscribeReq("unknown", "Transfer-Encoding: chunked\r\n") + "3\r\nabc\r\n0\r\n\r\n",
	} {
		c := dialRaw(t, ts.url)
		c.send(t, req)
		resp, body := c.response(t)
		require.Equal(t, 400, resp.StatusCode)
		require.True(t, resp.Close)
		require.Equal(t, api.CodeInvalidArgument, decodeAs[api.ErrorResponse](t, []byte(body)).Code)
	}
}

// TestStreamNeedsHTTP11: a stream is a chunked body, which HTTP/1.0 does
// not have: such a request is refused with a clear error.
func TestStreamNeedsHTTP11(t *testing.T) {
	ts := startServer(t, t.TempDir())
	c := dialRaw(t, ts.url)
	c.send(t, strings.Replace(subscribeReq("unknown"), "HTTP/1.1", "HTTP/1.0", 1))
	resp, body := c.response(t)
	require.Equal(t, 400, resp.StatusCode)
	require.Equal(t, api.CodeInvalidArgument, decodeAs[api.ErrorResponse](t, []byte(body)).Code)
}

// TestStreamIdleConnectionCloses: after its stream, a connection waits for
// the next request as long as the server's idle timeout, then closes.
func TestStreamIdleConnectionCloses(t *testing.T) {
	s, err := Open(Config{Config: lockserver.DefaultConfig(), DataDir: t.TempDir()})
	require.NoError(t, err)
	s.Handler().HTTPServer().IdleTimeout = 100 * time.Millisecond
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- s.Serve(ln) }()
	t.Cleanup(func() {
		require.NoError(t, s.Shutdown(context.Background()))
		require.NoError(t, <-done)
	})

	c := dialRaw(t, "http://"+ln.Addr().String())
	c.send(t, subscribeReq("unknown"))
	resp, _ := c.response(t)
	require.Equal(t, 200, resp.StatusCode)
	_, err = c.r.ReadByte()
	require.ErrorIs(t, err, io.EOF, "closed by the idle timeout, not by the test's deadline (%v)", errors.Is(err, os.ErrDeadlineExceeded))
}

// TestShutdownClosesConnectionsAfterStreams: a connection waiting for the
// next request after its stream is the stream's, not the server's, to
// close: Shutdown closes it.
func TestShutdownClosesConnectionsAfterStreams(t *testing.T) {
	ts := startServer(t, t.TempDir())
	c := dialRaw(t, ts.url)
	c.send(t, subscribeReq("unknown"))
	resp, _ := c.response(t)
	require.Equal(t, 200, resp.StatusCode)
	ts.Stop()
	_, err := c.r.ReadByte()
	require.ErrorIs(t, err, io.EOF)
}
