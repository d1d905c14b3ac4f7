package httpserver

import (
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sharedcontent/sharedcontent/lockserver/api"
)

// pinOf is a well-formed blob digest ending in s.
func pinOf(s string) string { return "sha256:" + strings.Repeat("0", 64-len(s)) + s }

// listPins reads GET /pins as the admin.
func (p *peers) listPins(t *testing.T) []api.Pin {
	t.Helper()
	code, body := p.call(t, "admin", http.MethodGet, "/pins", nil, nil)
	require.Equal(t, http.StatusOK, code, string(body))
	return decodeAs[api.PinsResponse](t, body).Pins
}

// TestPinsAdminOnly (docs/design.md §8.21): every pin endpoint needs the
// admin identity: a node's token is 403 naming it, no credentials 401,
// and neither changes anything. The admin puts, reads, lists and deletes;
// the pin records who made it.
func TestPinsAdminOnly(t *testing.T) {
	p := startPeers(t)
	a, b := pinOf("a"), pinOf("b")
	for _, req := range []struct{ method, path string }{
		{http.MethodPut, "/pins/web"}, {http.MethodGet, "/pins/web"}, {http.MethodDelete, "/pins/web"}, {http.MethodGet, "/pins"},
	} {
		code, body := p.call(t, "node-a", req.method, req.path, nil, api.Pin{ResourceIDs: []string{a}})
		requireCode(t, http.StatusForbidden, api.CodeForbidden, code, body)
		require.Contains(t, decodeAs[api.ErrorResponse](t, body).Error, "needs the admin identity", "%s %s", req.method, req.path)
		code, body = p.call(t, "", req.method, req.path, nil, api.Pin{ResourceIDs: []string{a}})
		requireCode(t, http.StatusUnauthorized, api.CodeUnauthorized, code, body)
	}
	require.Empty(t, p.listPins(t))
	p.requireRefs(t, a, nil, "a refused pin holds nothing")

	code, body := p.call(t, "admin", http.MethodPut, "/pins/web", nil, api.Pin{Image: "example.com/web:1", ResourceIDs: []string{b, a}})
	require.Equal(t, http.StatusOK, code, string(body))
	got := decodeAs[api.Pin](t, body)
	require.Equal(t, "web", got.Name)
	require.Equal(t, []string{a, b}, got.ResourceIDs)
	require.Equal(t, "admin token", got.By)
	require.False(t, got.Created.IsZero())
	p.requireRefs(t, a, []string{"pin/web"}, "the pin holds a")

	code, body = p.call(t, "admin", http.MethodGet, "/pins/web", nil, nil)
	require.Equal(t, http.StatusOK, code, string(body))
	require.Equal(t, "example.com/web:1", decodeAs[api.Pin](t, body).Image)
	require.Len(t, p.listPins(t), 1)

	// A node's delete of a pinned blob is refused, naming the pin.
	p.addRef(t, "node-a", a)
	code, body = p.lockAs(t, "node-a", api.OperationDelete, a, "")
	requireCode(t, http.StatusConflict, api.CodeInUse, code, body)
	require.Contains(t, string(body), "pin/web")

	code, body = p.call(t, "admin", http.MethodDelete, "/pins/web", nil, nil)
	require.Equal(t, http.StatusOK, code, string(body))
	p.requireRefs(t, b, nil, "the pin's references went with it")
	code, body = p.call(t, "admin", http.MethodGet, "/pins/web", nil, nil)
	requireCode(t, http.StatusNotFound, api.CodeNotFound, code, body)
	code, body = p.call(t, "admin", http.MethodDelete, "/pins/web", nil, nil)
	requireCode(t, http.StatusNotFound, api.CodeNotFound, code, body)
}

// TestPinsBadInputChangesNothing: malformed JSON, a bad name, a bad
// digest, a body over the limit: each a clear 4xx naming the fault, and
// the pins and references stay as they were.
func TestPinsBadInputChangesNothing(t *testing.T) {
	p := startPeers(t)
	a := pinOf("a")
	code, body := p.call(t, "admin", http.MethodPut, "/pins/web", nil, api.Pin{ResourceIDs: []string{a}})
	require.Equal(t, http.StatusOK, code, string(body))
	before := p.listPins(t)

	huge := `{"resource_ids":["` + strings.Repeat("x", api.MaxBodyBytes) + `"]}`
	for _, tc := range []struct {
		path, body     string
		status         int
		code, contains string
	}{
		{"/pins/web", `{"resource_ids":[`, http.StatusBadRequest, api.CodeInvalidArgument, "malformed JSON"},
		{"/pins/web", `{"resource_ids":"sha256:a"}`, http.StatusBadRequest, api.CodeInvalidArgument, "malformed JSON"},
		{"/pins/-web", `{"resource_ids":["` + a + `"]}`, http.StatusBadRequest, api.CodeInvalidArgument, "starting with a letter"},
		{"/pins/web", `{"resource_ids":["sha256:nothex"]}`, http.StatusBadRequest, api.CodeInvalidArgument, "not a blob digest"},
		{"/pins/web", `{"resource_ids":[]}`, http.StatusBadRequest, api.CodeInvalidArgument, "0 resource IDs"},
		{"/pins/web", `{"name":"other","resource_ids":["` + a + `"]}`, http.StatusBadRequest, api.CodeInvalidArgument, `names pin "other"`},
		{"/pins/web", `{"resource_ids":["` + a + `"],"expires":"2001-01-01T00:00:00Z"}`, http.StatusBadRequest, api.CodeInvalidArgument, "has passed"},
		{"/pins/web", huge, http.StatusRequestEntityTooLarge, api.CodeTooLarge, "exceeds"},
	} {
		code, body := p.call(t, "admin", http.MethodPut, tc.path, nil, tc.body)
		requireCode(t, tc.status, tc.code, code, body)
		require.Contains(t, decodeAs[api.ErrorResponse](t, body).Error, tc.contains, tc.body[:min(len(tc.body), 60)])
	}
	require.Equal(t, before, p.listPins(t))
	p.requireRefs(t, a, []string{"pin/web"}, "bad input changed nothing")
	// A path deeper than a name routes nowhere.
	code, body = p.call(t, "admin", http.MethodGet, "/pins/web/x", nil, nil)
	requireCode(t, http.StatusNotFound, api.CodeNotFound, code, body)
}
