package httpserver

import (
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	logtest "github.com/sirupsen/logrus/hooks/test"
	"github.com/stretchr/testify/require"

	"github.com/sharedcontent/sharedcontent/lockserver"
)

// TestIdentity (docs/design.md §9): the start-up log names the identity mode
// actually configured, node tokens and certificates included.
func TestIdentity(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{}, "none"},
		{Config{AuthTokenFile: "t"}, "shared-token"},
		{Config{AuthTokenFile: "t", AdminTokenFile: "a"}, "shared-token"},
		{Config{NodeTokensFile: "n", AdminTokenFile: "a"}, "node-tokens"},
		{Config{TLSClientCA: "ca", TLSNodeIdentity: true}, "mtls"},
		{Config{NodeTokensFile: "n", TLSClientCA: "ca", TLSNodeIdentity: true}, "node-tokens+mtls"},
		{Config{AdminTokenFile: "a"}, "admin-token"},
	} {
		require.Equal(t, tc.want, tc.cfg.Identity(), "%+v", tc.cfg)
	}
}

// TestStartWarnings (docs/design.md §9): node tokens without an admin identity, and
// serving anonymous callers beyond loopback, are warned about; a safe
// configuration is not.
func TestStartWarnings(t *testing.T) {
	wildcard := &net.TCPAddr{IP: net.IPv4zero, Port: 8642}
	for _, tc := range []struct {
		name             string
		cfg              Config
		addr             net.Addr
		noAdmin, exposed []string // what each warning says; nil: no warning
	}{
		{name: "loopback, no identity", addr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)}},
		{name: "IPv6 loopback", addr: &net.TCPAddr{IP: net.IPv6loopback}},
		{name: "unix socket", addr: &net.UnixAddr{Name: "/run/x.sock", Net: "unix"}},
		{name: "wildcard, no identity", addr: wildcard,
			exposed: []string{"anyone who can reach 0.0.0.0:8642 can forget nodes or adopt the cluster", "--node-tokens-file/--admin-token-file or mTLS", "docs/security.md"}},
		{name: "IPv6 wildcard", addr: &net.TCPAddr{IP: net.IPv6unspecified, Port: 1},
			exposed: []string{"anyone who can reach [::]:1 can forget nodes"}},
		{name: "a LAN address", addr: &net.TCPAddr{IP: net.IPv4(10, 1, 2, 3), Port: 1},
			exposed: []string{"anyone who can reach 10.1.2.3:1"}},
		{name: "admin token only", cfg: Config{AdminTokenFile: "a"}, addr: wildcard,
			exposed: []string{"anyone who can reach 0.0.0.0:8642 can act as any node", "--node-tokens-file or mTLS"}},
		{name: "shared token", cfg: Config{AuthTokenFile: "t"}, addr: wildcard},
		{name: "client certificates", cfg: Config{TLSClientCA: "ca"}, addr: wildcard},
		{name: "node and admin tokens", cfg: Config{NodeTokensFile: "n", AdminTokenFile: "a"}, addr: wildcard},
		{name: "node tokens, no admin", cfg: Config{NodeTokensFile: "n"}, addr: wildcard,
			noAdmin: []string{"--node-tokens-file is set without --admin-token-file", "every admin call", "is refused", "set --admin-token-file"}},
		{name: "node tokens, admin certificates", cfg: Config{NodeTokensFile: "n", TLSClientCA: "ca", TLSNodeIdentity: true}, addr: wildcard},
	} {
		t.Run(tc.name, func(t *testing.T) {
			requireSays(t, tc.cfg.noAdminWarning(), tc.noAdmin)
			requireSays(t, tc.cfg.exposedWarning(tc.addr), tc.exposed)
		})
	}
}

// requireSays checks that msg says every part of want, or that it is
// empty when want is nil.
func requireSays(t *testing.T, msg string, want []string) {
	t.Helper()
	if want == nil {
		require.Empty(t, msg)
		return
	}
	for _, w := range want {
		require.Contains(t, msg, w)
	}
}

// TestServerWarnsAtStart (docs/design.md §9): Open warns about node tokens without
// an admin token; Serve warns that anyone may call when it listens beyond
// loopback without identity, and says it again while it serves.
func TestServerWarnsAtStart(t *testing.T) {
	old := logrus.StandardLogger().ReplaceHooks(make(logrus.LevelHooks))
	t.Cleanup(func() { logrus.StandardLogger().ReplaceHooks(old) })
	hook := logtest.NewGlobal()
	warnings := func(part string) int {
		n := 0
		for _, e := range hook.AllEntries() {
			if e.Level == logrus.WarnLevel && strings.Contains(e.Message, part) {
				n++
			}
		}
		return n
	}

	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "nodes"), "n1 tok1\n")
	s, err := Open(Config{Config: lockserver.DefaultConfig(), DataDir: filepath.Join(dir, "a"), NodeTokensFile: filepath.Join(dir, "nodes")})
	require.NoError(t, err)
	require.NoError(t, s.Shutdown(t.Context()))
	require.Equal(t, 1, warnings("without --admin-token-file"))

	s, err = Open(Config{Config: lockserver.DefaultConfig(), DataDir: filepath.Join(dir, "b")})
	require.NoError(t, err)
	s.exposedWarnEvery = time.Millisecond
	ln, err := net.Listen("tcp", "0.0.0.0:0")
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- s.Serve(ln) }()
	reach := "anyone who can reach " + ln.Addr().String() + " can forget nodes"
	require.Eventually(t, func() bool { return warnings(reach) >= 2 }, 10*time.Second, time.Millisecond, "warned at start and again")
	require.NoError(t, s.Shutdown(t.Context()))
	require.NoError(t, <-done)

	s, err = Open(Config{Config: lockserver.DefaultConfig(), DataDir: filepath.Join(dir, "c")})
	require.NoError(t, err)
	ln, err = net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go func() { done <- s.Serve(ln) }()
	code, _ := get(t, "http://"+ln.Addr().String(), "/healthz", nil) // serving: past the warning
	require.Equal(t, http.StatusOK, code)
	require.NoError(t, s.Shutdown(t.Context()))
	require.NoError(t, <-done)
	require.Zero(t, warnings("anyone who can reach "+ln.Addr().String()), "loopback only: no warning")
}
