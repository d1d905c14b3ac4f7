package lockclient

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sharedcontent/sharedcontent/lockserver/api"
	"github.com/sharedcontent/sharedcontent/lockserver/lockservertest"
)

// TestEndSession: through a Client, against both transports, an instance
// ends its own live session, after which another instance opens one at
// once; another instance's end changes nothing and is no error.
func TestEndSession(t *testing.T) {
	for _, h := range harnesses() {
		t.Run(h.name, func(t *testing.T) {
			c := h.setup(t)("node-a")
			ctx := context.Background()
			_, err := c.Session(ctx, api.SessionRequest{InstanceID: "i1"})
			require.NoError(t, err)

			resp, err := c.EndSession(ctx, "i2")
			require.NoError(t, err)
			require.False(t, resp.Ended, "another instance's end")
			require.Contains(t, resp.Reason, "another instance")
			_, err = c.Session(ctx, api.SessionRequest{InstanceID: "i2"})
			require.ErrorIs(t, err, api.ErrDuplicateNode, "i1's session still stands")

			resp, err = c.EndSession(ctx, "i1")
			require.NoError(t, err)
			require.True(t, resp.Ended)
			nodes, err := c.Nodes(ctx)
			require.NoError(t, err)
			require.Len(t, nodes.Nodes, 1)
			require.False(t, nodes.Nodes[0].Live)
			_, err = c.Session(ctx, api.SessionRequest{InstanceID: "i2"})
			require.NoError(t, err, "the next instance opens at once")
		})
	}
}

// TestEndSessionActsAsItself: with node tokens, a node may end only its
// own session.
func TestEndSessionActsAsItself(t *testing.T) {
	tokens := map[string]string{"node-a": "tok-a", "node-c": "tok-c"}
	ts := lockservertest.Start(t, lockservertest.WithNodeTokens(tokens))
	ctx := context.Background()
	a := newHTTPClient(t, ts.URL(), "node-a", WithBearerToken("tok-a"))
	_, err := a.Session(ctx, api.SessionRequest{InstanceID: "i1"})
	require.NoError(t, err)

	impostor := newHTTPClient(t, ts.URL(), "node-a", WithBearerToken("tok-c"))
	_, err = impostor.EndSession(ctx, "i1")
	require.ErrorIs(t, err, api.ErrForbidden, "node-c's credentials ending node-a's session")
	resp, err := a.EndSession(ctx, "i1")
	require.NoError(t, err)
	require.True(t, resp.Ended, "node-a's session was left live by the impostor")
}

// TestNodesWalksPages (docs/design.md §10): Client.Nodes asks the coordinator a page
// at a time and returns every member once, in order.
func TestNodesWalksPages(t *testing.T) {
	defer func(n int) { nodesPage = n }(nodesPage)
	nodesPage = 3
	ts := lockservertest.Start(t)
	ctx := context.Background()
	members := 2*nodesPage + 2
	for i := range members {
		_, err := ts.Core().Session(ctx, api.SessionRequest{NodeID: fmt.Sprintf("n%05d", i)})
		require.NoError(t, err)
	}
	nodes, err := newHTTPClient(t, ts.URL(), "admin").Nodes(ctx)
	require.NoError(t, err)
	require.Len(t, nodes.Nodes, members)
	require.Empty(t, nodes.Next)
	for i, n := range nodes.Nodes {
		require.Equal(t, fmt.Sprintf("n%05d", i), n.NodeID)
	}
}
