package httpserver

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sharedcontent/sharedcontent/lockserver/api"
)

// TestBigSyncStallsNoSession: a node with 100,000 references sends the
// last chunk of its full sync while other nodes renew their sessions
// (docs/design.md §10.5). The sync's write goes on without the members'
// mutex, so no renewal waits more than a third of the session TTL (the
// timing rule's own bound on a renewal's delay, docs/design.md §8.8),
// however long the write takes. The renewals are timed around the done
// request, with the bbolt store a real coordinator runs on.
func TestBigSyncStallsNoSession(t *testing.T) {
	if testing.Short() {
		t.Skip("writes 100,000 references")
	}
	const refs = 100_000
	ttl := 15 * time.Second
	ts := startServer(t, t.TempDir(), func(c *Config) { c.SessionTTL = ttl })
	ids := make([]string, refs)
	for i := range ids {
		ids[i] = fmt.Sprintf("sha256:%064x", i)
	}
	renewers := []string{"r1", "r2", "r3"}
	nodes := map[string]*wireNode{}
	for _, n := range append([]string{"big"}, renewers...) {
		nodes[n] = &wireNode{base: ts.url, id: n}
		require.NoError(t, nodes[n].session())
	}
	big := nodes["big"]
	zero := 0
	_, err := big.sync(api.SyncRequest{Step: api.SyncStepAnnounce, SyncID: "b1", ResourceIDs: []string{}, Offset: &zero})
	require.NoError(t, err)
	sent := 0
	for sent+api.MaxSyncChunk < refs {
		require.NoError(t, big.session()) // renewed as a node does meanwhile
		offset := sent
		_, err := big.sync(api.SyncRequest{Step: api.SyncStepChunk, SyncID: "b1", ResourceIDs: ids[sent : sent+api.MaxSyncChunk], Offset: &offset})
		require.NoError(t, err)
		sent += api.MaxSyncChunk
	}

	stop := make(chan struct{})
	var (
		mu        sync.Mutex
		latencies []time.Duration
		renewed   []time.Time // when each renewal was answered
		renewErr  error
		wg        sync.WaitGroup
	)
	for _, n := range append(renewers, "big") { // big renews too, as its daemon does
		wg.Add(1)
		go func(n *wireNode) {
			defer wg.Done()
			pace := time.NewTicker(ttl / 300) // many renewals, not a busy loop
			defer pace.Stop()
			for {
				select {
				case <-stop:
					return
				case <-pace.C:
				}
				start := time.Now()
				err := n.session()
				if errors.Is(err, errLate) {
					// Sent late by this process (starved on a loaded
					// machine: its echo says so), not answered late:
					// open a new session, as a node does.
					n.forget()
					err = n.session()
				}
				end := time.Now()
				mu.Lock()
				latencies = append(latencies, end.Sub(start))
				renewed = append(renewed, end)
				if err != nil && renewErr == nil {
					renewErr = err
				}
				mu.Unlock()
				if err != nil {
					return
				}
			}
		}(nodes[n])
	}

	require.NoError(t, big.session()) // a fresh echo for the done
	offset := sent
	doneStart := time.Now()
	resp, err := big.sync(api.SyncRequest{Step: api.SyncStepDone, SyncID: "b1", ResourceIDs: ids[sent:], Offset: &offset, Done: true, Echo: big.echo()})
	doneEnd := time.Now()
	close(stop)
	wg.Wait()
	require.NoError(t, err)
	require.True(t, resp.Synced)
	require.Equal(t, refs, resp.Received)
	t.Logf("done of a %d-reference sync took %s; %d renewals meanwhile", refs, doneEnd.Sub(doneStart), len(latencies))

	mu.Lock()
	defer mu.Unlock()
	during := 0
	for _, at := range renewed {
		if at.After(doneStart) && at.Before(doneEnd) {
			during++
		}
	}
	require.Positive(t, during, "some renewal was answered while the done was being written")
	worst := time.Duration(0)
	for _, d := range latencies {
		worst = max(worst, d)
	}
	t.Logf("slowest renewal: %s (bound: session TTL/3 = %s)", worst, ttl/3)
	require.LessOrEqual(t, worst, ttl/3, "a renewal waited for the big sync's write")
	require.NoError(t, renewErr)

	status, body := get(t, ts.url, "/nodes", nil)
	require.Equal(t, http.StatusOK, status)
	for _, n := range decodeAs[api.NodesResponse](t, body).Nodes {
		require.True(t, n.Synced || n.NodeID != "big", "the big node is synced once its done is answered")
	}
	require.Equal(t, []string{"big"}, refsOf(t, ts.Coordinator, ids[0]))
	require.Equal(t, []string{"big"}, refsOf(t, ts.Coordinator, ids[refs-1]))
}

// wireNode is a node speaking the wire protocol over HTTP, as lockclient
// does, safe to use from any goroutine (errors are returned, not fatal).
type wireNode struct {
	base, id string
	mu       sync.Mutex
	last     api.SessionResponse
	received time.Time
}

// echo is the node's echo of its last session answer, nil before one.
func (n *wireNode) echo() *api.Echo {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.received.IsZero() {
		return nil
	}
	return &api.Echo{Epoch: n.last.Epoch, StampMs: n.last.StampMs, ElapsedMs: time.Since(n.received).Milliseconds()}
}

// errLate is a session call refused as sent late (409 late).
var errLate = errors.New("late")

// forget drops the node's last session answer: its next session call
// opens a new session.
func (n *wireNode) forget() {
	n.mu.Lock()
	n.received = time.Time{}
	n.mu.Unlock()
}

// session opens or renews the node's session.
func (n *wireNode) session() error {
	var resp api.SessionResponse
	if err := n.call(http.MethodPost, "/nodes/session", api.SessionRequest{NodeID: n.id, Echo: n.echo()}, &resp); err != nil {
		return err
	}
	n.mu.Lock()
	n.last, n.received = resp, time.Now()
	n.mu.Unlock()
	return nil
}

// sync sends one request of the node's sync.
func (n *wireNode) sync(req api.SyncRequest) (api.SyncResponse, error) {
	var resp api.SyncResponse
	err := n.call(http.MethodPut, "/nodes/"+n.id+"/refs", req, &resp)
	return resp, err
}

func (n *wireNode) call(method, path string, body, out any) error {
	j, err := json.Marshal(body)
	if err != nil {
		return err
	}
	req, err := http.NewRequest(method, n.base+path, bytes.NewReader(j))
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		err := fmt.Errorf("%s %s: %d %s", method, path, resp.StatusCode, b)
		var body api.ErrorResponse
		if json.Unmarshal(b, &body) == nil && body.Code == api.CodeLate {
			err = fmt.Errorf("%w: %w", errLate, err)
		}
		return err
	}
	return json.Unmarshal(b, out)
}
