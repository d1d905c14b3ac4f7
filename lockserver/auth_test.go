package lockserver

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

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

// TestHTTPAuthSchemeCaseInsensitive (issue 17): the "Bearer" scheme is
// matched case-insensitively (RFC 7235), for the client token and the
// admin token alike; the token itself is not, and anything else is 401.
func TestHTTPAuthSchemeCaseInsensitive(t *testing.T) {
	dir := t.TempDir()
	token, admin := filepath.Join(dir, "token"), filepath.Join(dir, "admin")
	require.NoError(t, os.WriteFile(token, []byte("s3cret\n"), 0o600))
	require.NoError(t, os.WriteFile(admin, []byte("adm1n\n"), 0o600))
	ts := startServer(t, filepath.Join(dir, "data"), func(c *ServerConfig) {
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
	st, err := ts.Locker.Status(context.Background(), api.OperationPull, blob, "", "")
	require.NoError(t, err)
	require.NotNil(t, st.Holder, "the lock was taken")
	// Admin calls: the admin token, in any case of the scheme; not the client token.
	require.Equal(t, http.StatusForbidden, do(t, http.MethodDelete, ts.url+"/nodes/gone", "bearer s3cret"))
	require.Equal(t, http.StatusOK, do(t, http.MethodDelete, ts.url+"/nodes/gone", "BEARER adm1n"))
}
