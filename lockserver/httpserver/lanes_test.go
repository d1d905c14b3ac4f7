package httpserver

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sharedcontent/sharedcontent/internal/testutil/members"
	"github.com/sharedcontent/sharedcontent/lockserver"
	"github.com/sharedcontent/sharedcontent/lockserver/api"
	"github.com/sharedcontent/sharedcontent/refcount"
)

// TestLanesServeUnlocksFirst: with every slot of the bulk lane taken, a new
// lock request waits for one, while an unlock and a session renewal are
// answered at once (docs/design.md §10, "Unlocks first").
func TestLanesServeUnlocksFirst(t *testing.T) {
	l := newTestCoordinator(t)
	members.Open(t, l, "node-a")
	h := NewHandler(l, WithBulkSlots(1))
	url := serveHandler(t, h)
	held := mustLock(t, l, api.OperationPull, "node-a")
	require.True(t, held.Acquired)

	h.lanes.enter() // the one slot, as a handler serving new work holds it
	answered := postAsync(url, "/lock", lockReq(api.OperationPull, "node-b"))
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

// heldCommits is a memory storage whose reference writes wait at a gate
// (open), as a bbolt commit waits for its fsync.
type heldCommits struct {
	refcount.LocalStorage
	submitted chan struct{}
	open      chan struct{}
}

func (s *heldCommits) Submit(ctx context.Context, b *refcount.Batch) func() error {
	s.submitted <- struct{}{}
	return func() error {
		<-s.open
		return s.Commit(ctx, b)
	}
}

// TestLanesAddGivesBackItsSlot: a reference add waiting for its commit
// holds no slot of new work (lockserver.WithCommitWait): with one slot, a
// lock request is answered while the add waits.
func TestLanesAddGivesBackItsSlot(t *testing.T) {
	store := &heldCommits{LocalStorage: refcount.NewMemoryStorage(), submitted: make(chan struct{}), open: make(chan struct{})}
	l, err := lockserver.NewCoordinator(lockserver.DefaultConfig(), lockserver.Options{Refs: refcount.NewManager(store)})
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	members.Open(t, l, "node-a")
	h := NewHandler(l, WithBulkSlots(1))
	url := serveHandler(t, h)
	added := postAsync(url, "/refs/add", api.RefsAddRequest{ResourceID: blob, NodeID: "node-a"})
	<-store.submitted // the add's write is ordered
	code, body := post(t, url, "/lock", lockReq(api.OperationPull, "node-b"))
	require.Equal(t, http.StatusOK, code, string(body))
	close(store.open)
	require.Equal(t, http.StatusOK, <-added)
}

// postAsync posts body as JSON to base+path in a goroutine; the channel
// receives the answer's status (0: no answer).
func postAsync(base, path string, body any) <-chan int {
	answered := make(chan int, 1)
	go func() {
		b, _ := json.Marshal(body)
		resp, err := http.Post(base+path, "application/json", bytes.NewReader(b))
		if err != nil {
			answered <- 0
			return
		}
		resp.Body.Close()
		answered <- resp.StatusCode
	}()
	return answered
}
