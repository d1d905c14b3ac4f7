package httpserver

import (
	"bufio"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sharedcontent/sharedcontent/lockserver/api"
)

const leaderURL = "https://coordinator-0.example:8080"

// TestStandbyAnswersNotLeader: a standby answers every API call 503
// not_leader naming the leader (body and header), before the cluster
// check; /healthz is 200, /readyz 503 not_leader, /metrics served. The
// same server leads once Set says so.
func TestStandbyAnswersNotLeader(t *testing.T) {
	lead := NewStaticLeadership(false, leaderURL)
	ts := startServer(t, t.TempDir(), func(c *Config) { c.Leadership = lead })
	lockBody := `{"type":"pull","resource_id":"` + blob + `","node_id":"n1","request_id":"r1"}`

	requireNotLeader := func(code int, body []byte, hdr http.Header, want string) {
		t.Helper()
		require.Equal(t, http.StatusServiceUnavailable, code, string(body))
		e := decodeAs[api.ErrorResponse](t, body)
		require.Equal(t, api.CodeNotLeader, e.Code)
		require.Equal(t, want, e.Leader)
		require.Equal(t, want, hdr.Get(api.LeaderHeader))
		err := api.FromResponse(code, e)
		var nl *api.NotLeaderError
		require.True(t, errors.As(err, &nl) && errors.Is(err, api.ErrNotLeader), "%v", err)
		require.Equal(t, want, nl.Leader)
	}
	for _, c := range []struct{ method, path, body string }{
		{http.MethodPost, "/lock", ""},
		{http.MethodPost, "/refs/add", `{"resource_id":"` + blob + `","node_id":"n1"}`},
		{http.MethodGet, "/refs?resource_id=" + blob, ""},
		{http.MethodPost, "/nodes/session", `{"node_id":"n1"}`},
		{http.MethodPut, "/nodes/n1/refs", `{"sync_id":"s","done":true}`},
		{http.MethodDelete, "/nodes/n1", ""},
		{http.MethodGet, "/cluster", ""},
		{http.MethodGet, "/lock/events?node_id=n1", ""},
		{http.MethodGet, "/lock/subscribe?type=pull&resource_id=" + blob, ""},
	} {
		body := c.body
		if c.path == "/lock" {
			body = lockBody
		}
		code, out, hdr := call(t, c.method, ts.url+c.path, body, api.ClusterHeader, "another-cluster")
		requireNotLeader(code, out, hdr, leaderURL)
	}
	code, out, hdr := call(t, http.MethodGet, ts.url+"/readyz", "")
	requireNotLeader(code, out, hdr, leaderURL)
	code, _, _ = call(t, http.MethodGet, ts.url+"/healthz", "")
	require.Equal(t, http.StatusOK, code)
	code, out, _ = call(t, http.MethodGet, ts.url+"/metrics", "")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, string(out), "sharedcontent_event_streams_open")

	// A standby that does not know the leader sends no header.
	lead.Set(false, "")
	code, out, hdr = call(t, http.MethodPost, ts.url+"/lock", lockBody)
	requireNotLeader(code, out, hdr, "")
	_, present := hdr[http.CanonicalHeaderKey(api.LeaderHeader)]
	require.False(t, present, "no leader header when the leader is unknown")

	lead.Set(true, "")
	code, out, hdr = call(t, http.MethodPost, ts.url+"/lock", lockBody)
	require.Equal(t, http.StatusOK, code, string(out))
	require.True(t, decodeAs[api.LockResponse](t, out).Acquired)
	require.Empty(t, hdr.Get(api.LeaderHeader))
	code, _, _ = call(t, http.MethodGet, ts.url+"/readyz", "")
	require.Equal(t, http.StatusOK, code)
}

// TestStreamsEndWhenLeadershipEnds: a replica that stops leading ends its
// open event streams (the body ends properly), and a new stream is refused
// not_leader.
func TestStreamsEndWhenLeadershipEnds(t *testing.T) {
	l := newTestCoordinator(t)
	lead := NewStaticLeadership(true, "")
	h := NewHandler(l, WithLeadership(lead))
	base := serveHandler(t, h)
	resp, _ := openNodeEvents(t, base, "n1", "")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	body := bufio.NewReader(resp.Body)
	name, _ := nextEvent(t, body)
	require.Equal(t, api.EventState, name)
	require.Equal(t, 1, h.streams.openOf(streamOfNode))

	lead.Set(false, leaderURL)
	rest, err := io.ReadAll(body) // the chunked body's end, then EOF
	require.NoError(t, err, "the stream ends cleanly")
	require.NotContains(t, string(rest), "event:")
	require.Eventually(t, func() bool { return h.streams.openOf(streamOfNode) == 0 }, 10*time.Second, time.Millisecond)

	resp, _ = openNodeEvents(t, base, "n1", "")
	require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	require.Equal(t, leaderURL, resp.Header.Get(api.LeaderHeader))
}

// call sends one request with an optional body and header pairs, and
// returns the status, body and header of the answer.
func call(t *testing.T, method, u, body string, hdr ...string) (int, []byte, http.Header) {
	t.Helper()
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, u, r)
	require.NoError(t, err)
	return send(t, req, hdr...)
}
