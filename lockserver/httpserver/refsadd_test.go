package httpserver

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sharedcontent/sharedcontent/internal/testutil/members"
	"github.com/sharedcontent/sharedcontent/lockserver/api"
)

// TestRefsAddCountOnly: POST /refs/add answers a node that predates
// count_only with the reference set's nodes, as it always did, and a
// node that sends it with the count alone (docs/design.md §10.2).
func TestRefsAddCountOnly(t *testing.T) {
	l := newTestCoordinator(t)
	members.Open(t, l, "node-a", "node-b", "node-c")
	url := serveHandler(t, NewHandler(l))
	add := func(req api.RefsAddRequest) (api.RefsResponse, map[string]json.RawMessage) {
		t.Helper()
		code, body := post(t, url, "/refs/add", req)
		require.Equal(t, http.StatusOK, code, string(body))
		var resp api.RefsResponse
		require.NoError(t, json.Unmarshal(body, &resp))
		var raw map[string]json.RawMessage
		require.NoError(t, json.Unmarshal(body, &raw))
		return resp, raw
	}
	resp, _ := add(api.RefsAddRequest{ResourceID: blob, NodeID: "node-a"})
	require.Equal(t, api.RefsResponse{ResourceID: blob, Count: 1, Nodes: []string{"node-a"}}, resp)
	resp, raw := add(api.RefsAddRequest{ResourceID: blob, NodeID: "node-b", CountOnly: true})
	require.Equal(t, api.RefsResponse{ResourceID: blob, Count: 2}, resp)
	require.Equal(t, "null", string(raw["nodes"]))
	resp, _ = add(api.RefsAddRequest{ResourceID: blob, NodeID: "node-c", Found: true})
	require.Equal(t, []string{"node-a", "node-b", "node-c"}, resp.Nodes)
	require.Equal(t, 3, resp.Count)
}

// TestRefsAddWithoutSession: POST /refs/add for a node without a live
// session is 409 no_session, naming the node and what to do, and records
// nothing (docs/design.md §8.4); once the node has opened its session,
// the same call is recorded.
func TestRefsAddWithoutSession(t *testing.T) {
	l := newTestCoordinator(t)
	url := serveHandler(t, NewHandler(l))
	for _, found := range []bool{false, true} {
		code, body := post(t, url, "/refs/add", api.RefsAddRequest{ResourceID: blob, NodeID: "node-a", Found: found})
		require.Equal(t, http.StatusConflict, code, string(body))
		var e api.ErrorResponse
		require.NoError(t, json.Unmarshal(body, &e))
		require.Equal(t, api.CodeNoSession, e.Code)
		require.Contains(t, e.Error, "node node-a is not a member")
		require.Contains(t, e.Error, "open its session, then retry")
		require.ErrorIs(t, api.FromResponse(code, e), api.ErrNoSession, "a client maps it back")
	}
	require.Empty(t, refsOf(t, l, blob), "nothing recorded")

	members.Open(t, l, "node-a")
	code, body := post(t, url, "/refs/add", api.RefsAddRequest{ResourceID: blob, NodeID: "node-a"})
	require.Equal(t, http.StatusOK, code, string(body))
	require.Equal(t, []string{"node-a"}, refsOf(t, l, blob))
}
