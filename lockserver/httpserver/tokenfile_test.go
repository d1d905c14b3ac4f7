package httpserver

import (
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sharedcontent/sharedcontent/internal/tokenfile"
	"github.com/sharedcontent/sharedcontent/lockserver"
)

// TestTokenFileMode (docs/security.md "Token files"): a token file that grants other users any
// permission is refused at start, saying to chmod 600, for the client and
// the admin token alike; owner- and group-only modes are accepted (a
// Kubernetes secret volume with defaultMode 0440 is a symlink to such a
// file) and the token works over HTTP.
func TestTokenFileMode(t *testing.T) {
	write := func(t *testing.T, dir string, mode fs.FileMode) string {
		p := filepath.Join(dir, "token")
		require.NoError(t, os.WriteFile(p, []byte("s3cret\n"), 0o600))
		require.NoError(t, os.Chmod(p, mode)) // not subject to the umask
		return p
	}
	for _, mode := range []fs.FileMode{0o644, 0o604, 0o601, 0o602, 0o666} {
		for _, admin := range []bool{false, true} {
			dir := t.TempDir()
			p := write(t, dir, mode)
			cfg := Config{Config: lockserver.DefaultConfig(), DataDir: filepath.Join(dir, "data"), AuthTokenFile: p}
			if admin {
				cfg.AuthTokenFile, cfg.AdminTokenFile = "", p
			}
			s, err := Open(cfg)
			if err == nil {
				require.NoError(t, s.Shutdown(t.Context()))
			}
			require.ErrorIs(t, err, tokenfile.ErrExposed, "mode %#o admin=%v", mode, admin)
			require.ErrorContains(t, err, "token file "+p)
			require.ErrorContains(t, err, "chmod 600")
			require.ErrorContains(t, err, "defaultMode")
		}
	}
	for _, mode := range []fs.FileMode{0o600, 0o400, 0o440, 0o640} {
		dir := t.TempDir()
		p := write(t, dir, mode)
		link := filepath.Join(dir, "token-link") // as in a secret volume
		require.NoError(t, os.Symlink(p, link))
		ts := startServer(t, filepath.Join(dir, "data"), func(c *Config) { c.AuthTokenFile = link })
		require.Equal(t, http.StatusOK, do(t, http.MethodGet, ts.url+"/nodes", "Bearer s3cret"), "mode %#o", mode)
		require.Equal(t, http.StatusUnauthorized, do(t, http.MethodGet, ts.url+"/nodes", "Bearer other"), "mode %#o", mode)
	}
}
