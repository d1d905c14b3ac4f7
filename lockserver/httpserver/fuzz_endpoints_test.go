package httpserver

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sharedcontent/sharedcontent/lockserver"
	"github.com/sharedcontent/sharedcontent/lockserver/api"
	"github.com/sharedcontent/sharedcontent/refcount"
)

// bodyEndpoints are the endpoints that take a JSON body.
var bodyEndpoints = []struct{ method, path string }{
	{http.MethodPost, "/lock"},
	{http.MethodPost, "/unlock"},
	{http.MethodPost, "/lock/keepalive"},
	{http.MethodPost, "/lock/cancel"},
	{http.MethodPost, "/refs/add"},
	{http.MethodPost, "/nodes/session"},
	{http.MethodPut, "/nodes/node-a/refs"},
	{http.MethodPost, "/cluster/adopt"},
	{http.MethodPost, "/nodes/session/end"},
}

// FuzzEndpoints sends arbitrary bodies to every endpoint that takes one,
// over HTTP, against a coordinator with a holder, a waiter, references
// and members. Whatever the body: no panic, no 5xx, and an answer in the
// 4xx changes nothing — except what the protocol defines a refusal to do:
// a refused delete has dropped the requester's own reference (docs/design.md §3.3),
// and a delete lease found unsynced at its keepalive has ended (docs/design.md §8.7).
func FuzzEndpoints(f *testing.F) {
	seeds := map[int][]string{
		0: {`{"type":"pull","resource_id":"sha256:aaaa","node_id":"node-b"}`, `{"type":"delete","resource_id":"sha256:aaaa","node_id":"node-b","reap":"orphan"}`,
			`{"type":"delete","resource_id":"sha256:used","node_id":"node-a","reap":"bogus"}`, `{"type":"pull","resource_id":"sha256:aaaa","node_id":"node-a","reap":"dangling"}`,
			`{"type":"pull","resource_id":"sha256:aaaa","node_id":"node-a","node_id":"x"}`, `{"type":"pull","resource_id":1}`},
		1: {`{"type":"pull","resource_id":"sha256:aaaa","lease_id":"00000000000000000000000000000000","success":true}`, `{"success":"yes"}`},
		2: {`{"type":"pull","resource_id":"sha256:aaaa","lease_id":"x"}`},
		3: {`{"type":"pull","resource_id":"sha256:aaaa","node_id":"node-c","request_id":"nope"}`, `{"type":"pull","resource_id":"sha256:aaaa"}`},
		4: {`{"resource_id":"","node_id":"n"}`, `{"resource_id":"sha256:new","node_id":"node-z","extra":[1,2]}`},
		5: {`{"node_id":""}`, `{"node_id":"node-a","cluster_id":"someone-else"}`},
		6: {`{"resource_ids":["a"],"done":true,"session":"x"}`, `{"resource_ids":7}`},
		7: {`{"cluster_id":""}`, `{"cluster_id":"c","nodes":["a\u0000"]}`},
		8: {`{"node_id":"node-a"}`, `{"node_id":"node-a","instance_id":"i"}`, `{"node_id":"nobody","instance_id":"i"}`},
	}
	for ep, bodies := range seeds {
		for _, b := range bodies {
			f.Add(uint8(ep), []byte(b))
		}
	}
	f.Add(uint8(0), []byte(`[]`))
	f.Add(uint8(1), []byte(`{`))
	f.Add(uint8(6), []byte(strings.Repeat(`{"a":`, 100)))

	l, base := fuzzCoordinator(f)
	f.Fuzz(func(t *testing.T, ep uint8, body []byte) {
		e := bodyEndpoints[int(ep)%len(bodyEndpoints)]
		before := snapshot(t, l)
		req, err := http.NewRequest(e.method, base+e.path, bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		out, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode >= 500 {
			t.Fatalf("%s %s %q: %d %s", e.method, e.path, body, resp.StatusCode, out)
		}
		if resp.StatusCode < 400 || refusalMayChange(e.path, resp.StatusCode, out) {
			return
		}
		if after := snapshot(t, l); after != before {
			t.Fatalf("%s %s %q answered %d %s but changed the state:\nbefore:\n%s\nafter:\n%s", e.method, e.path, body, resp.StatusCode, out, before, after)
		}
	})
}

// refusalMayChange reports the refusals the protocol defines to change
// something: a delete refused in_use or unsynced (its requester's
// reference is gone), a delete lease ending at its keepalive.
func refusalMayChange(path string, status int, body []byte) bool {
	if status != http.StatusConflict {
		return false
	}
	return (path == "/lock" || path == "/lock/keepalive") &&
		(bytes.Contains(body, []byte(`"code":"in_use"`)) || bytes.Contains(body, []byte(`"code":"unsynced"`)))
}

// fuzzCoordinator serves a Coordinator with some state on loopback.
func fuzzCoordinator(f *testing.F) (*lockserver.Coordinator, string) {
	// Nothing expires while the fuzzer runs: the sweepers must not change
	// the state between two snapshots.
	cfg := lockserver.DefaultConfig()
	cfg.LeaseTTL, cfg.ClaimTimeout, cfg.CompletedTTL = 24*time.Hour, 24*time.Hour, 24*time.Hour
	cfg.SessionTTL, cfg.NodeExpiry = 24*time.Hour, 48*time.Hour
	l, err := lockserver.NewCoordinator(cfg, lockserver.Options{Refs: refcount.NewManager(refcount.NewMemoryStorage())})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { l.Close() })
	ctx := context.Background()
	for _, n := range []string{"node-a", "node-c"} {
		if _, err := l.Session(ctx, api.SessionRequest{NodeID: n}); err != nil {
			f.Fatal(err)
		}
	}
	if _, err := l.AddRef(ctx, "sha256:used", "node-c"); err != nil {
		f.Fatal(err)
	}
	for _, n := range []string{"node-a", "node-c"} {
		if _, err := l.Lock(ctx, api.LockRequest{Type: api.OperationPull, ResourceID: blob, NodeID: n, RequestID: "r-" + n}); err != nil {
			f.Fatal(err)
		}
	}
	h := NewHandler(l)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		f.Fatal(err)
	}
	srv := h.HTTPServer()
	go func() { _ = srv.Serve(ln) }()
	f.Cleanup(func() { h.Drain(); _ = srv.Shutdown() })
	return l, "http://" + ln.Addr().String()
}

// snapshot renders the coordinator's whole state.
func snapshot(t *testing.T, l *lockserver.Coordinator) string {
	d, err := l.Dump(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return d
}
