package httpserver

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sharedcontent/sharedcontent/lockserver/api"
)

// rawRequest sends one request exactly as written over conn and reads
// the answer.
func rawRequest(t *testing.T, conn net.Conn, br *bufio.Reader, method, target, body string) (int, []byte) {
	t.Helper()
	_, err := fmt.Fprintf(conn, "%s %s HTTP/1.1\r\nHost: lockserver\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s",
		method, target, len(body), body)
	require.NoError(t, err)
	resp, err := http.ReadResponse(br, nil)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, b
}

// TestHTTPPathNotNormalized (docs/design.md §10.3): a path is routed as sent. An
// encoded '/', a dot segment or a doubled '/' is 404 not_found and does
// nothing, where fasthttp's normalizing served it as the endpoint it
// resolves to (which a path-filtering proxy in front would not expect). A
// percent-encoded path that decodes to an endpoint is still served: node
// IDs are sent escaped.
func TestHTTPPathNotNormalized(t *testing.T) {
	ts := startServer(t, t.TempDir())
	code, body := post(t, ts.url, "/lock", api.LockRequest{Type: api.OperationPull, ResourceID: blob, NodeID: "n1", RequestID: "r1"})
	require.Equal(t, http.StatusOK, code, string(body))
	code, body = post(t, ts.url, "/lock", api.LockRequest{Type: api.OperationPull, ResourceID: blob, NodeID: "n2", RequestID: "r2"})
	require.Equal(t, http.StatusOK, code, string(body))
	require.True(t, decodeAs[api.LockResponse](t, body).Queued)

	conn, err := net.Dial("tcp", strings.TrimPrefix(ts.url, "http://"))
	require.NoError(t, err)
	defer conn.Close()
	br := bufio.NewReader(conn)
	cancel, err := json.Marshal(api.CancelRequest{Type: api.OperationPull, ResourceID: blob, NodeID: "n2", RequestID: "r2"})
	require.NoError(t, err)
	for _, target := range []string{
		"/lock%2fcancel",
		"/lock%2Fcancel",
		"/lock/../lock/cancel",
		"/lock/%2e%2e/lock/cancel",
		"/lock/./cancel",
		"//lock/cancel",
		"/lock//cancel",
		"/lock/cancel/.",
	} {
		code, body := rawRequest(t, conn, br, http.MethodPost, target, string(cancel))
		require.Equal(t, http.StatusNotFound, code, "%s: %s", target, body)
		e := decodeAs[api.ErrorResponse](t, body)
		require.Equal(t, "not_found", e.Code, target)
		require.Contains(t, e.Error, fmt.Sprintf("no endpoint %q", target))
	}
	// None of them cancelled r2: it is still queued.
	q := url.Values{"type": {"pull"}, "resource_id": {blob}, "node_id": {"n2"}, "request_id": {"r2"}}
	code, body = rawRequest(t, conn, br, http.MethodGet, "/lock/status?"+q.Encode(), "")
	require.Equal(t, http.StatusOK, code, string(body))
	st := decodeAs[api.StatusResponse](t, body)
	require.NotNil(t, st.Request)
	require.True(t, st.Request.Queued, "r2 was not cancelled")

	// Escaped but canonical paths are served.
	code, body = rawRequest(t, conn, br, http.MethodGet, "/lock/st%61tus?"+q.Encode(), "")
	require.Equal(t, http.StatusOK, code, string(body))
	code, body = rawRequest(t, conn, br, http.MethodDelete, "/nodes/node%201", "")
	require.Equal(t, http.StatusNotFound, code, string(body))
	require.Contains(t, decodeAs[api.ErrorResponse](t, body).Error, "forget node node 1: no such member",
		"DELETE /nodes/{id} with an escaped id is routed, unescaped, to the coordinator (node 1 never joined)")
	code, body = rawRequest(t, conn, br, http.MethodPost, "/lock/cancel", string(cancel))
	require.Equal(t, http.StatusOK, code, string(body))
}
