package httpserver

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sharedcontent/sharedcontent/lockserver/api"
)

// TestRefsAddCountOnly: POST /refs/add answers a node that predates
// count_only with the reference set's nodes, as it always did, and a
// node that sends it with the count alone (docs/design.md §10.2).
func TestRefsAddCountOnly(t *testing.T) {
	url := serveHandler(t, NewHandler(newTestCoordinator(t)))
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
