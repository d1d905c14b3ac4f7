package httpserver

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sharedcontent/sharedcontent/lockserver/api"
)

// TestNodesPages (docs/design.md §10): GET /nodes answers a page at a time with
// after and limit, in node ID order, naming the next page's after; without
// limit (an older client) it answers every member, as before; a bad limit
// is 400 and changes nothing.
func TestNodesPages(t *testing.T) {
	ts := startServer(t, t.TempDir())
	const members = 7
	for i := range members {
		_, err := ts.Coordinator.Session(context.Background(), api.SessionRequest{NodeID: fmt.Sprintf("n%d", i)})
		require.NoError(t, err)
	}
	status, body := get(t, ts.url, "/nodes", nil)
	require.Equal(t, http.StatusOK, status, string(body))
	all := decodeAs[api.NodesResponse](t, body)
	require.Len(t, all.Nodes, members, "no limit: every member")
	require.Empty(t, all.Next)

	var walked []string
	after := ""
	for pages := 0; ; pages++ {
		require.Less(t, pages, members, "the walk ends")
		status, body := get(t, ts.url, "/nodes", url.Values{"after": {after}, "limit": {"3"}})
		require.Equal(t, http.StatusOK, status, string(body))
		page := decodeAs[api.NodesResponse](t, body)
		require.LessOrEqual(t, len(page.Nodes), 3)
		for _, n := range page.Nodes {
			walked = append(walked, n.NodeID)
		}
		if page.Next == "" {
			break
		}
		require.Equal(t, page.Nodes[len(page.Nodes)-1].NodeID, page.Next)
		after = page.Next
	}
	var want []string
	for _, n := range all.Nodes {
		want = append(want, n.NodeID)
	}
	require.Equal(t, want, walked, "the pages make the whole list, in order, once each")

	for _, bad := range []string{"-1", "x"} {
		status, body = get(t, ts.url, "/nodes", url.Values{"limit": {bad}})
		require.Equal(t, http.StatusBadRequest, status, string(body))
	}
}
