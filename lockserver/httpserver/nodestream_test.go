package httpserver

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sharedcontent/sharedcontent/lockserver/api"
)

// openNodeEvents sends GET /lock/events for node (with token, if any) on a
// new connection and returns the answer's head and a reader of its body.
func openNodeEvents(t *testing.T, base, node, token string) (*http.Response, net.Conn) {
	t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	require.NoError(t, c.SetDeadline(time.Now().Add(10*time.Second)))
	auth := ""
	if token != "" {
		auth = "Authorization: Bearer " + token + "\r\n"
	}
	_, err = fmt.Fprintf(c, "GET /lock/events?node_id=%s HTTP/1.1\r\nHost: x\r\n%s\r\n", node, auth)
	require.NoError(t, err)
	r, err := http.ReadResponse(bufio.NewReader(c), nil)
	require.NoError(t, err)
	return r, c
}

// nextEvent reads the next event (not a comment) of an SSE body.
func nextEvent(t *testing.T, r *bufio.Reader) (name string, data []byte) {
	t.Helper()
	for {
		line, err := r.ReadString('\n')
		require.NoError(t, err)
		line = strings.TrimRight(line, "\r\n")
		switch {
		case strings.HasPrefix(line, "event: "):
			name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			data = []byte(strings.TrimPrefix(line, "data: "))
		case line == "" && name != "":
			return name, data
		}
	}
}

// TestNodeEvents: GET /lock/events starts with the node's state (with the
// stream limits in effect) and then carries the outcome of each of the
// node's queued requests, tagged with its request ID, without ending.
func TestNodeEvents(t *testing.T) {
	l := newTestCoordinator(t)
	h := NewHandler(l)
	base := serveHandler(t, h)
	a := mustLock(t, l, api.OperationUpdate, "n1")
	resp, _ := openNodeEvents(t, base, "n2", "")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))
	body := bufio.NewReader(resp.Body)
	name, data := nextEvent(t, body)
	require.Equal(t, api.EventState, name)
	var st api.NodeStreamState
	require.NoError(t, json.Unmarshal(data, &st))
	require.Equal(t, "n2", st.NodeID)
	require.Equal(t, StreamSlack, st.Limits.Total, "no members yet: the slack")
	require.Equal(t, 1, h.streams.openOf(streamOfNode))

	b1 := mustLock(t, l, api.OperationUpdate, "n2")
	b2 := mustLock(t, l, api.OperationUpdate, "n2")
	lease := a.LeaseID
	for _, b := range []locked{b1, b2} {
		require.True(t, b.Queued)
		_, err := l.Unlock(t.Context(), api.UnlockRequest{Type: api.OperationUpdate, ResourceID: blob, LeaseID: lease})
		require.NoError(t, err)
		name, data = nextEvent(t, body)
		require.Equal(t, api.EventGranted, name)
		var ev api.Event
		require.NoError(t, json.Unmarshal(data, &ev))
		require.Equal(t, b.RequestID, ev.RequestID)
		require.NotNil(t, ev.Lease)
		lease = ev.Lease.LeaseID
		require.Eventually(t, func() bool {
			st, err := l.Status(t.Context(), api.OperationUpdate, blob, "", "")
			require.NoError(t, err)
			return st.Holder.Claimed
		}, 10*time.Second, time.Millisecond, "written, so claimed")
	}
}

// TestNodeEventsRefusals: a node stream names its node, and with node
// identities only the node itself may open it.
func TestNodeEventsRefusals(t *testing.T) {
	l := newTestCoordinator(t)
	base := serveHandler(t, NewHandler(l, WithNodeTokens(map[string]string{"tok-a": "node-a"})))
	resp, _ := openNodeEvents(t, base, "node-b", "tok-a")
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	require.Equal(t, http.StatusForbidden, resp.StatusCode, string(b))
	resp, _ = openNodeEvents(t, base, "node-a", "tok-a")
	require.Equal(t, http.StatusOK, resp.StatusCode)

	base = serveHandler(t, NewHandler(l))
	resp, _ = openNodeEvents(t, base, "", "")
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
}

// TestStreamLimitFollowsMembers: the limit in all is StreamsPerMember per
// (current) member plus StreamSlack, never above the fixed limit.
func TestStreamLimitFollowsMembers(t *testing.T) {
	l := newTestCoordinator(t)
	h := NewHandler(l, WithStreamLimits(StreamSlack+3*StreamsPerMember, 100, 10))
	require.Equal(t, StreamSlack, h.streams.limits().Total)
	current := func(node string) {
		t.Helper()
		_, err := l.Session(context.Background(), api.SessionRequest{NodeID: node, InstanceID: "i-" + node})
		require.NoError(t, err)
	}
	current("m1")
	current("m2")
	lim := h.streams.limits()
	require.Equal(t, 2, lim.Members)
	require.Equal(t, StreamSlack+2*StreamsPerMember, lim.Total)
	current("m3")
	current("m4")
	require.Equal(t, StreamSlack+3*StreamsPerMember, h.streams.limits().Total, "capped by the fixed limit")
}
