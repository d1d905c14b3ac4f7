package lockclient

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sharedcontent/sharedcontent/lockserver/api"
	"github.com/sharedcontent/sharedcontent/lockserver/lockservertest"
)

// TestPins (docs/design.md §8.21): the admin puts, lists, reads and
// deletes a pin through a real coordinator; a node's token is refused
// (403) and a bad name never leaves the client; an embedded client
// refuses pins.
func TestPins(t *testing.T) {
	ts := lockservertest.Start(t, lockservertest.WithAdminToken("tok-admin"), lockservertest.WithNodeTokens(map[string]string{"node-a": "tok-a"}))
	ctx := context.Background()
	admin := newHTTPClient(t, ts.URL(), "admin", WithBearerToken("tok-admin"))
	node := newHTTPClient(t, ts.URL(), "node-a", WithBearerToken("tok-a"))
	a, b := "sha256:"+strings.Repeat("a", 64), "sha256:"+strings.Repeat("b", 64)
	expires := time.Now().Add(time.Hour).UTC().Truncate(time.Second)

	_, err := node.PutPin(ctx, api.Pin{Name: "web", ResourceIDs: []string{a}})
	require.ErrorIs(t, err, api.ErrForbidden)
	_, err = node.Pins(ctx)
	require.ErrorIs(t, err, api.ErrForbidden)
	_, err = admin.PutPin(ctx, api.Pin{Name: "../web", ResourceIDs: []string{a}})
	require.ErrorIs(t, err, api.ErrInvalidArgument)

	p, err := admin.PutPin(ctx, api.Pin{Name: "web", Image: "example.com/web:1", ResourceIDs: []string{b, a}, Expires: &expires})
	require.NoError(t, err)
	require.Equal(t, []string{a, b}, p.ResourceIDs)
	require.Equal(t, "admin token", p.By)
	require.True(t, expires.Equal(*p.Expires))
	ps, err := admin.Pins(ctx)
	require.NoError(t, err)
	require.Len(t, ps, 1)
	require.Equal(t, "example.com/web:1", ps[0].Image)
	got, err := admin.Pin(ctx, "web")
	require.NoError(t, err)
	require.Equal(t, p.ResourceIDs, got.ResourceIDs)
	refs, err := admin.Refs(ctx, a)
	require.NoError(t, err)
	require.Equal(t, []string{"pin/web"}, refs.Nodes)

	require.ErrorIs(t, node.DeletePin(ctx, "web"), api.ErrForbidden)
	require.NoError(t, admin.DeletePin(ctx, "web"))
	require.ErrorIs(t, admin.DeletePin(ctx, "web"), api.ErrNotFound)
	ps, err = admin.Pins(ctx)
	require.NoError(t, err)
	require.Empty(t, ps)

	embedded, err := NewEmbedded(ts.Core(), WithNodeID("admin"))
	require.NoError(t, err)
	defer embedded.Close()
	_, err = embedded.Pins(ctx)
	require.ErrorIs(t, err, api.ErrInvalidArgument)
}
