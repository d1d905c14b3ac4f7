package httpserver

import (
	"bytes"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sharedcontent/sharedcontent/lockserver/api"
)

// TestLanesServeUnlocksFirst: with every slot of the bulk lane taken, a new
// lock request waits for one, while an unlock and a session renewal are
// answered at once (docs/design.md §10, "Unlocks first").
func TestLanesServeUnlocksFirst(t *testing.T) {
	l := newTestCoordinator(t)
	h := NewHandler(l, WithBulkSlots(1))
	url := serveHandler(t, h)
	held := mustLock(t, l, api.OperationPull, "node-a")
	require.True(t, held.Acquired)

	h.lanes.enter() // the one slot, as a handler serving new work holds it
	answered := make(chan int, 1)
	go func() {
		body, _ := json.Marshal(lockReq(api.OperationPull, "node-b"))
		resp, err := http.Post(url+"/lock", "application/json", bytes.NewReader(body))
		if err != nil {
			answered <- 0
			return
		}
		resp.Body.Close()
		answered <- resp.StatusCode
	}()
	require.Eventually(t, func() bool { return h.lanes.waiting.Load() == 1 }, time.Minute, time.Millisecond,
		"the lock request waits for the bulk slot")

	code, body := post(t, url, "/unlock", api.UnlockRequest{Type: api.OperationPull, ResourceID: blob, LeaseID: held.LeaseID, NodeID: "node-a", Success: true})
	require.Equal(t, http.StatusOK, code, string(body))
	code, body = post(t, url, "/nodes/session", api.SessionRequest{NodeID: "node-c"})
	require.Equal(t, http.StatusOK, code, string(body))
	select {
	case c := <-answered:
		t.Fatalf("the lock request was answered (%d) while the bulk slot was taken", c)
	default:
	}
	require.EqualValues(t, 1, h.lanes.waiting.Load())

	h.lanes.leave()
	require.Equal(t, http.StatusOK, <-answered)
	require.Zero(t, h.lanes.waiting.Load())
}

// TestLanesLongBodiesOutside: a request whose body the server had not read
// whole before its handler (chunked here) does not take a bulk slot, so
// that slow senders cannot hold them.
func TestLanesLongBodiesOutside(t *testing.T) {
	l := newTestCoordinator(t)
	h := NewHandler(l, WithBulkSlots(1))
	url := serveHandler(t, h)
	h.lanes.enter()
	defer h.lanes.leave()
	body, _ := json.Marshal(lockReq(api.OperationPull, "node-b"))
	req, err := http.NewRequest(http.MethodPost, url+"/lock", struct{ *bytes.Reader }{bytes.NewReader(body)}) // no length: chunked
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	code, out, _ := send(t, req)
	require.Equal(t, http.StatusOK, code, string(out))
	require.Zero(t, h.lanes.waiting.Load())
}
