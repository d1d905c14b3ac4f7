package httpserver

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sharedcontent/sharedcontent/internal/testutil/members"
	"github.com/sharedcontent/sharedcontent/lockserver"
	"github.com/sharedcontent/sharedcontent/lockserver/api"
)

// do sends method path with an Authorization header (none when empty).
func do(t *testing.T, method, u, auth string) int {
	t.Helper()
	req, err := http.NewRequest(method, u, nil)
	require.NoError(t, err)
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	return resp.StatusCode
}

// TestHTTPAuthSchemeCaseInsensitive (docs/design.md §9): the "Bearer" scheme is
// matched case-insensitively (RFC 7235), for the client token and the
// admin token alike; the token itself is not, and anything else is 401.
func TestHTTPAuthSchemeCaseInsensitive(t *testing.T) {
	dir := t.TempDir()
	token, admin := filepath.Join(dir, "token"), filepath.Join(dir, "admin")
	require.NoError(t, os.WriteFile(token, []byte("s3cret\n"), 0o600))
	require.NoError(t, os.WriteFile(admin, []byte("adm1n\n"), 0o600))
	ts := startServer(t, filepath.Join(dir, "data"), func(c *Config) {
		c.AuthTokenFile, c.AdminTokenFile = token, admin
	})
	// The admin identity may read too.
	for _, auth := range []string{"Bearer s3cret", "bearer s3cret", "BEARER s3cret", "bEaReR s3cret", "bearer  s3cret", "bearer adm1n"} {
		require.Equal(t, http.StatusOK, do(t, http.MethodGet, ts.url+"/nodes", auth), auth)
	}
	for _, auth := range []string{"", "s3cret", "bearer", "bearer ", "Bearers3cret", "Basic s3cret", "bearer S3CRET",
		"bearer s3cret2", "bearer s3cre", "bearer\ts3cret"} {
		require.Equal(t, http.StatusUnauthorized, do(t, http.MethodGet, ts.url+"/nodes", auth), "%q", auth)
	}
	// A lowercase scheme acts, not just reads.
	code, body := post(t, ts.url, "/lock", api.LockRequest{Type: api.OperationPull, ResourceID: blob, NodeID: "n1"},
		"Authorization", "bearer s3cret")
	require.Equal(t, http.StatusOK, code, string(body))
	st, err := ts.Coordinator.Status(context.Background(), api.OperationPull, blob, "", "")
	require.NoError(t, err)
	require.NotNil(t, st.Holder, "the lock was taken")
	// Admin calls: the admin token, in any case of the scheme; not the client token.
	require.Equal(t, http.StatusForbidden, do(t, http.MethodDelete, ts.url+"/nodes/gone", "bearer s3cret"))
	require.Equal(t, http.StatusNotFound, do(t, http.MethodDelete, ts.url+"/nodes/gone", "BEARER adm1n"), "let through: gone never joined")
}

// TestSharedTokenWithNodeIdentitiesRefused (docs/design.md §9): with
// --auth-token-file and --node-tokens-file both set, the shared token
// could act as any node (it dropped node-a's references). The
// combination is refused at start, with --tls-node-identity too, naming
// the flags and what to use instead; a Handler given both anyway takes
// no shared token.
func TestSharedTokenWithNodeIdentitiesRefused(t *testing.T) {
	dir := t.TempDir()
	token, nodes := filepath.Join(dir, "token"), filepath.Join(dir, "nodes")
	writeFile(t, token, "shared\n")
	writeFile(t, nodes, "node-a tok-a\n")
	for _, tc := range []struct {
		name, flag string
		mutate     func(*Config)
	}{
		{"node tokens", "--node-tokens-file", func(c *Config) { c.NodeTokensFile = nodes }},
		{"certificates", "--tls-node-identity", func(c *Config) { c.TLSNodeIdentity, c.TLSClientCA = true, filepath.Join(dir, "ca.pem") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := Config{Config: lockserver.DefaultConfig(), DataDir: filepath.Join(dir, "data-"+tc.name), AuthTokenFile: token}
			tc.mutate(&cfg)
			s, err := Open(cfg)
			if err == nil {
				require.NoError(t, s.Shutdown(context.Background()))
			}
			require.Error(t, err, "a shared token with node identities must be refused")
			for _, want := range []string{"--auth-token-file", tc.flag, "act as any node", "--node-tokens-file", "--admin-token-file"} {
				require.ErrorContains(t, err, want)
			}
		})
	}

	l := newTestCoordinator(t)
	members.Open(t, l, "node-a")
	url := serveHandler(t, NewHandler(l, WithBearerToken("shared"), WithNodeTokens(map[string]string{"tok-a": "node-a"})))
	code, body := post(t, url, "/refs/add", api.RefsAddRequest{ResourceID: blob, NodeID: "node-a"}, "Authorization", "Bearer tok-a")
	require.Equal(t, http.StatusOK, code, string(body))
	code, body = post(t, url, "/lock", api.LockRequest{Type: api.OperationDelete, ResourceID: blob, NodeID: "node-a"}, "Authorization", "Bearer shared")
	require.Equal(t, http.StatusUnauthorized, code, string(body))
	refs, err := l.Refs(context.Background(), blob)
	require.NoError(t, err)
	require.Equal(t, []string{"node-a"}, refs.Nodes, "node-a's reference is intact")
}
