package httpserver

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sharedcontent/sharedcontent/internal/testutil/members"
	"github.com/sharedcontent/sharedcontent/lockserver"
	"github.com/sharedcontent/sharedcontent/lockserver/api"
)

type testServer struct {
	*Server
	url  string
	dir  string
	stop func()
}

func startServer(t *testing.T, dir string, mutate ...func(*Config)) *testServer {
	t.Helper()
	cfg := Config{Config: lockserver.DefaultConfig(), DataDir: dir}
	for _, m := range mutate {
		m(&cfg)
	}
	s, err := Open(cfg)
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- s.Serve(ln) }()
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			require.NoError(t, s.Shutdown(context.Background()))
			require.NoError(t, <-done)
		}
	})
	ts := &testServer{Server: s, url: "http://" + ln.Addr().String(), dir: dir}
	ts.stop = func() {
		stopped = true
		require.NoError(t, s.Shutdown(context.Background()))
		require.NoError(t, <-done)
	}
	return ts
}

// Stop shuts the server down before the test ends.
func (ts *testServer) Stop() { ts.stop() }

func post(t *testing.T, base, path string, body any, hdr ...string) (int, []byte) {
	t.Helper()
	var r io.Reader
	switch b := body.(type) {
	case string:
		r = strings.NewReader(b)
	case []byte:
		r = bytes.NewReader(b)
	case io.Reader:
		r = b
	default:
		j, err := json.Marshal(b)
		require.NoError(t, err)
		r = bytes.NewReader(j)
	}
	req, err := http.NewRequest(http.MethodPost, base+path, r)
	require.NoError(t, err)
	code, out, _ := send(t, req, hdr...)
	return code, out
}

// send sends req with the header pairs hdr and returns the status, body
// and header of the answer.
func send(t *testing.T, req *http.Request, hdr ...string) (int, []byte, http.Header) {
	t.Helper()
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, out, resp.Header
}

func get(t *testing.T, base, path string, q url.Values) (int, []byte) {
	t.Helper()
	resp, err := http.Get(base + path + "?" + q.Encode())
	require.NoError(t, err)
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, out
}

func decodeAs[T any](t *testing.T, b []byte) T {
	t.Helper()
	var v T
	require.NoError(t, json.Unmarshal(b, &v), string(b))
	return v
}

func TestHTTPLockUnlock(t *testing.T) {
	ts := startServer(t, t.TempDir())
	members.Open(t, ts.Coordinator, "n1", "n2")
	code, body := post(t, ts.url, "/lock", api.LockRequest{Type: api.OperationPull, ResourceID: blob, NodeID: "n1", RequestID: "r1"})
	require.Equal(t, http.StatusOK, code, string(body))
	a := decodeAs[api.LockResponse](t, body)
	require.True(t, a.Acquired)
	require.Equal(t, "r1", a.RequestID)
	require.Equal(t, lockserver.DefaultLeaseTTL.Milliseconds(), a.LeaseTTLMs)
	require.Len(t, a.LeaseID, 32)

	code, body = post(t, ts.url, "/lock", api.LockRequest{Type: api.OperationPull, ResourceID: blob, NodeID: "n2"})
	require.Equal(t, http.StatusOK, code)
	require.True(t, decodeAs[api.LockResponse](t, body).Queued)

	code, body = post(t, ts.url, "/lock/keepalive", api.KeepaliveRequest{Type: api.OperationPull, ResourceID: blob, LeaseID: a.LeaseID})
	require.Equal(t, http.StatusOK, code, string(body))

	code, body = post(t, ts.url, "/unlock", api.UnlockRequest{Type: api.OperationPull, ResourceID: blob, LeaseID: a.LeaseID, Success: true})
	require.Equal(t, http.StatusOK, code, string(body))

	code, body = get(t, ts.url, "/refs", url.Values{"resource_id": {blob}})
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, api.RefsResponse{ResourceID: blob, Count: 1, Nodes: []string{"n1"}}, decodeAs[api.RefsResponse](t, body))

	code, body = get(t, ts.url, "/lock/status", url.Values{"type": {"pull"}, "resource_id": {blob}})
	require.Equal(t, http.StatusOK, code)
	st := decodeAs[api.StatusResponse](t, body)
	require.NotNil(t, st.Completed)
	require.Empty(t, st.Queue, "the waiter skipped")

	code, body = get(t, ts.url, "/metrics", nil)
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, string(body), `sharedcontent_lock_requests_total{result="acquired",type="pull"} 1`)
	require.Contains(t, string(body), `sharedcontent_lock_requests_total{result="skipped",type="pull"} 1`)
	require.Contains(t, string(body), "sharedcontent_lock_hold_seconds_bucket")
	for _, p := range []string{"/healthz", "/readyz"} {
		code, _ = get(t, ts.url, p, nil)
		require.Equal(t, http.StatusOK, code, p)
	}
}

func TestHTTPBadInput(t *testing.T) {
	ts := startServer(t, t.TempDir())
	members.Open(t, ts.Coordinator, "n1", "other")
	held := decodeAs[api.LockResponse](t, func() []byte {
		_, b := post(t, ts.url, "/lock", api.LockRequest{Type: api.OperationPull, ResourceID: blob, NodeID: "n1"})
		return b
	}())
	_, err := ts.Coordinator.AddRef(context.Background(), "sha256:used", "other")
	require.NoError(t, err)

	huge := `{"type":"pull","resource_id":"` + strings.Repeat("a", api.MaxBodyBytes) + `","node_id":"n"}`
	for _, tc := range []struct {
		name, path, body string
		status           int
		code             string
	}{
		{"malformed", "/lock", `{"type":`, 400, api.CodeInvalidArgument},
		{"not an object", "/lock", `[1,2]`, 400, api.CodeInvalidArgument},
		{"duplicate member", "/lock", `{"type":"pull","resource_id":"x","node_id":"n","node_id":"m"}`, 400, api.CodeInvalidArgument},
		{"wrong member type", "/lock", `{"type":"pull","resource_id":"x","node_id":7}`, 400, api.CodeInvalidArgument},
		{"invalid UTF-8", "/lock", "{\"type\":\"pull\",\"resource_id\":\"x\xff\",\"node_id\":\"n\"}", 400, api.CodeInvalidArgument},
		{"trailing data", "/lock", `{"type":"pull","resource_id":"x","node_id":"n"} {}`, 400, api.CodeInvalidArgument},
		{"missing node", "/lock", `{"type":"pull","resource_id":"x"}`, 400, api.CodeInvalidArgument},
		{"unknown type", "/lock", `{"type":"merge","resource_id":"x","node_id":"n"}`, 400, api.CodeInvalidArgument},
		{"control char", "/lock", `{"type":"pull","resource_id":"a\u0007b","node_id":"n"}`, 400, api.CodeInvalidArgument},
		{"oversized id", "/lock", `{"type":"pull","resource_id":"` + strings.Repeat("a", 513) + `","node_id":"n"}`, 400, api.CodeInvalidArgument},
		{"too large", "/lock", huge, 413, api.CodeTooLarge},
		{"wrong lease", "/unlock", `{"type":"pull","resource_id":"` + blob + `","lease_id":"nope","success":true}`, 403, api.CodeNotHolder},
		{"wrong lease keepalive", "/lock/keepalive", `{"type":"pull","resource_id":"` + blob + `","lease_id":"nope"}`, 403, api.CodeNotHolder},
		{"locked", "/lock", `{"type":"pull","resource_id":"` + blob + `","node_id":"n2","wait":false}`, 409, api.CodeLocked},
		{"in use", "/lock", `{"type":"delete","resource_id":"sha256:used","node_id":"n2"}`, 409, api.CodeInUse},
		{"refs bad", "/refs/add", `{"resource_id":"","node_id":"n"}`, 400, api.CodeInvalidArgument},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, body := post(t, ts.url, tc.path, tc.body)
			require.Equal(t, tc.status, code, string(body))
			e := decodeAs[api.ErrorResponse](t, body)
			require.Equal(t, tc.code, e.Code)
			require.NotEmpty(t, e.Error)
			if tc.code == api.CodeInUse {
				require.Equal(t, []string{"other"}, e.Refs.Nodes)
			}
		})
	}
	code, body := get(t, ts.url, "/lock/status", url.Values{"type": {"nope"}, "resource_id": {blob}})
	require.Equal(t, 400, code, string(body))
	code, body = post(t, ts.url, "/lock/nope", `{}`)
	require.Equal(t, 404, code, string(body))
	require.Equal(t, api.CodeNotFound, decodeAs[api.ErrorResponse](t, body).Code)
	code, body = get(t, ts.url, "/lock", nil)
	require.Equal(t, 405, code, string(body))
	require.Equal(t, api.CodeMethodNotAllowed, decodeAs[api.ErrorResponse](t, body).Code)
	for _, tc := range []struct {
		method, path string
		status       int
		allow        string
	}{
		{http.MethodHead, "/healthz", 200, ""},
		{http.MethodHead, "/lock/status", 400, ""}, // allowed; no type given
		{http.MethodHead, "/lock/subscribe", 405, "GET"},
		{http.MethodPut, "/refs", 405, "GET, HEAD"},
		{http.MethodGet, "/unlock", 405, "POST"},
		{http.MethodPost, "/pins/web", 405, "GET, HEAD, PUT, DELETE"},
	} {
		req, err := http.NewRequest(tc.method, ts.url+tc.path, nil)
		require.NoError(t, err)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, tc.status, resp.StatusCode, "%s %s", tc.method, tc.path)
		require.Equal(t, tc.allow, resp.Header.Get("Allow"), "%s %s", tc.method, tc.path)
	}
	// A body without a length (chunked) is bounded as well.
	code, body = post(t, ts.url, "/lock", io.MultiReader(strings.NewReader(huge)))
	require.Equal(t, 413, code, string(body))
	require.Equal(t, api.CodeTooLarge, decodeAs[api.ErrorResponse](t, body).Code)

	// Nothing changed: the holder still holds, nobody queued, refs intact.
	st, err := ts.Coordinator.Status(context.Background(), api.OperationPull, blob, "", "")
	require.NoError(t, err)
	require.Equal(t, "n1", st.Holder.NodeID)
	require.Empty(t, st.Queue)
	refs, err := ts.Coordinator.Refs(context.Background(), "sha256:used")
	require.NoError(t, err)
	require.Equal(t, []string{"other"}, refs.Nodes)
	code, _ = post(t, ts.url, "/unlock", api.UnlockRequest{Type: api.OperationPull, ResourceID: blob, LeaseID: held.LeaseID})
	require.Equal(t, 200, code)
}

func TestHTTPAuth(t *testing.T) {
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "token")
	require.NoError(t, os.WriteFile(tokenFile, []byte("s3cret\n"), 0o600))
	ts := startServer(t, dir, func(c *Config) { c.AuthTokenFile = tokenFile })
	req := api.LockRequest{Type: api.OperationPull, ResourceID: blob, NodeID: "n1"}
	code, body := post(t, ts.url, "/lock", req)
	require.Equal(t, 401, code)
	require.Equal(t, api.CodeUnauthorized, decodeAs[api.ErrorResponse](t, body).Code)
	code, _ = post(t, ts.url, "/lock", req, "Authorization", "Bearer wrong")
	require.Equal(t, 401, code)
	st, _ := ts.Coordinator.Status(context.Background(), api.OperationPull, blob, "", "")
	require.Nil(t, st.Holder, "an unauthorized request changes nothing")
	code, body = post(t, ts.url, "/lock", req, "Authorization", "Bearer s3cret")
	require.Equal(t, 200, code, string(body))
	code, _ = get(t, ts.url, "/healthz", nil)
	require.Equal(t, 200, code, "health checks need no token")
}

// sseEvent is one parsed Server-Sent Event.
type sseEvent struct {
	name string
	data string
}

func readEvents(r *bufio.Reader, out chan<- sseEvent) {
	defer close(out)
	var ev sseEvent
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return
		}
		line = strings.TrimRight(line, "\n")
		switch {
		case strings.HasPrefix(line, "event: "):
			ev.name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			ev.data = strings.TrimPrefix(line, "data: ")
		case line == "" && ev.name != "":
			out <- ev
			ev = sseEvent{}
		}
	}
}

func subscribeHTTP(t *testing.T, ts *testServer, q url.Values) (<-chan sseEvent, func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, ts.url+"/lock/subscribe?"+q.Encode(), nil)
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	require.Equal(t, 200, resp.StatusCode)
	require.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))
	events := make(chan sseEvent, 16)
	go readEvents(bufio.NewReader(resp.Body), events)
	return events, func() { cancel(); resp.Body.Close() }
}

func TestHTTPSubscribe(t *testing.T) {
	ts := startServer(t, t.TempDir())
	members.Open(t, ts.Coordinator, "n1", "n2")
	lock := func(node, rid string) api.LockResponse {
		_, b := post(t, ts.url, "/lock", api.LockRequest{Type: api.OperationPull, ResourceID: blob, NodeID: node, RequestID: rid})
		return decodeAs[api.LockResponse](t, b)
	}
	a := lock("n1", "ra")
	require.True(t, lock("n2", "rb").Queued)
	require.True(t, lock("n3", "rc").Queued)

	evB, closeB := subscribeHTTP(t, ts, url.Values{"type": {"pull"}, "resource_id": {blob}, "node_id": {"n2"}, "request_id": {"rb"}})
	defer closeB()
	first := <-evB
	require.Equal(t, api.EventState, first.name)
	st := decodeAs[api.StatusResponse](t, []byte(first.data))
	require.Equal(t, 1, st.Request.Position)

	evC, closeC := subscribeHTTP(t, ts, url.Values{"type": {"pull"}, "resource_id": {blob}, "node_id": {"n3"}, "request_id": {"rc"}})
	require.Equal(t, api.EventState, (<-evC).name)
	// C's stream closes: C leaves the queue at once.
	closeC()
	require.Eventually(t, func() bool {
		st, _ := ts.Coordinator.Status(context.Background(), api.OperationPull, blob, "", "")
		return len(st.Queue) == 1
	}, 5*time.Second, 5*time.Millisecond)

	// A fails: only B is woken, with a grant it can use.
	post(t, ts.url, "/unlock", api.UnlockRequest{Type: api.OperationPull, ResourceID: blob, LeaseID: a.LeaseID, Success: false})
	ev := <-evB
	require.Equal(t, api.EventGranted, ev.name)
	g := decodeAs[api.Event](t, []byte(ev.data))
	require.Equal(t, "n2", g.NodeID)
	require.Greater(t, g.Lease.Fence, a.Fence)
	code, body := post(t, ts.url, "/unlock", api.UnlockRequest{Type: api.OperationPull, ResourceID: blob, LeaseID: g.Lease.LeaseID, Success: true})
	require.Equal(t, 200, code, string(body))

	// A late subscriber (after the completion) still learns of it.
	require.True(t, lock("n4", "rd").Skip)
	evW, closeW := subscribeHTTP(t, ts, url.Values{"type": {"pull"}, "resource_id": {blob}})
	defer closeW()
	st = decodeAs[api.StatusResponse](t, []byte((<-evW).data))
	require.NotNil(t, st.Completed)
	require.Equal(t, "n2", st.Completed.NodeID)
}

func TestRestartKeepsRefsAndFences(t *testing.T) {
	dir := t.TempDir()
	ts := startServer(t, dir)
	members.Open(t, ts.Coordinator, "n1", "n2")
	var lastFence uint64
	for i := range 3 {
		id := fmt.Sprintf("sha256:%d", i)
		a, err := ts.Coordinator.Lock(context.Background(), api.LockRequest{Type: api.OperationPull, ResourceID: id, NodeID: "n1"})
		require.NoError(t, err)
		_, err = ts.Coordinator.Unlock(context.Background(), api.UnlockRequest{Type: api.OperationPull, ResourceID: id, LeaseID: a.LeaseID, Success: true})
		require.NoError(t, err)
		lastFence = a.Fence
	}
	_, err := ts.Coordinator.AddRef(context.Background(), "sha256:0", "n2")
	require.NoError(t, err)
	ts.Stop()

	ts2 := startServer(t, dir)
	code, body := get(t, ts2.url, "/refs", url.Values{"resource_id": {"sha256:0"}})
	require.Equal(t, 200, code)
	require.Equal(t, []string{"n1", "n2"}, decodeAs[api.RefsResponse](t, body).Nodes)
	code, body = post(t, ts2.url, "/lock", api.LockRequest{Type: api.OperationPull, ResourceID: "sha256:0", NodeID: "n3"})
	require.Equal(t, 200, code)
	a := decodeAs[api.LockResponse](t, body)
	require.True(t, a.Acquired, "completions are not persisted: the blob is checked again")
	require.Greater(t, a.Fence, lastFence, "fences keep increasing across restarts")
	code, _ = post(t, ts2.url, "/lock", api.LockRequest{Type: api.OperationDelete, ResourceID: "sha256:1", NodeID: "n2"})
	require.Equal(t, 409, code, "n1 still references sha256:1 after the restart")
}

func TestShutdownEndsStreams(t *testing.T) {
	ts := startServer(t, t.TempDir())
	_, _ = post(t, ts.url, "/lock", api.LockRequest{Type: api.OperationPull, ResourceID: blob, NodeID: "n1"})
	_, _ = post(t, ts.url, "/lock", api.LockRequest{Type: api.OperationPull, ResourceID: blob, NodeID: "n2", RequestID: "rb"})
	ev, closeB := subscribeHTTP(t, ts, url.Values{"type": {"pull"}, "resource_id": {blob}, "node_id": {"n2"}, "request_id": {"rb"}})
	defer closeB()
	<-ev
	ts.Stop() // returns only once the stream has ended
	_, open := <-ev
	require.False(t, open)
}
