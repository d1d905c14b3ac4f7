package httpserver

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net/http"
	"net/http/httptrace"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sharedcontent/sharedcontent/internal/testutil/members"
	"github.com/sharedcontent/sharedcontent/internal/testutil/testca"
	"github.com/sharedcontent/sharedcontent/lockserver/api"
)

func TestMutualTLS(t *testing.T) {
	dir := t.TempDir()
	ca := testca.New(t)
	sc, sk := ca.Issue(t, "server", x509.ExtKeyUsageServerAuth)
	ts := startServer(t, dir, func(c *Config) {
		c.TLSCert = testca.WriteFile(t, dir, "s.crt", sc)
		c.TLSKey = testca.WriteFile(t, dir, "s.key", sk)
		c.TLSClientCA = testca.WriteFile(t, dir, "ca.crt", ca.PEM)
	})
	url := strings.Replace(ts.url, "http://", "https://", 1) + "/healthz"
	roots := ca.Pool()

	noCert := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}}}
	_, err := noCert.Get(url)
	require.Error(t, err, "a client without a certificate is refused")

	cc, ck := ca.Issue(t, "node-1", x509.ExtKeyUsageClientAuth)
	pair, err := tls.X509KeyPair(cc, ck)
	require.NoError(t, err)
	withCert := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, Certificates: []tls.Certificate{pair}}}}
	resp, err := withCert.Get(url)
	require.NoError(t, err)
	_, err = io.ReadAll(resp.Body)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, 200, resp.StatusCode)

	// An event stream hands its TLS connection back: the next request
	// is served on it.
	base := strings.TrimSuffix(url, "/healthz")
	for _, path := range []string{"/lock/subscribe?type=pull&resource_id=" + blob + "&node_id=n&request_id=unknown", "/healthz"} {
		var reused bool
		ctx := httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{
			GotConn: func(i httptrace.GotConnInfo) { reused = i.Reused },
		})
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+path, nil)
		require.NoError(t, err)
		resp, err := withCert.Do(req)
		require.NoError(t, err)
		_, err = io.ReadAll(resp.Body)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, 200, resp.StatusCode, path)
		require.True(t, reused, "%s on the connection of the requests before", path)
	}

	_, err = http.Get(url)
	require.Error(t, err, "plain clients do not trust the test CA")
}

// TestMutualTLSNodeIdentity (docs/design.md §9): with --tls-node-identity a client
// certificate names its node (URI SAN, else CN) and the node may act only
// as itself; a certificate with the admin URI is the admin; a client
// without a certificate is refused at the handshake.
func TestMutualTLSNodeIdentity(t *testing.T) {
	dir := t.TempDir()
	ca := testca.New(t)
	sc, sk := ca.Issue(t, "server", x509.ExtKeyUsageServerAuth)
	ts := startServer(t, dir+"/data", func(c *Config) {
		c.TLSCert = testca.WriteFile(t, dir, "s.crt", sc)
		c.TLSKey = testca.WriteFile(t, dir, "s.key", sk)
		c.TLSClientCA = testca.WriteFile(t, dir, "ca.crt", ca.PEM)
		c.TLSNodeIdentity = true
	})
	members.Open(t, ts.Coordinator, "node-a", "node-c")
	base := strings.Replace(ts.url, "http://", "https://", 1)
	client := func(certPEM, keyPEM []byte) *http.Client {
		tc := &tls.Config{RootCAs: ca.Pool()}
		if certPEM != nil {
			pair, err := tls.X509KeyPair(certPEM, keyPEM)
			require.NoError(t, err)
			tc.Certificates = []tls.Certificate{pair}
		}
		return &http.Client{Transport: &http.Transport{TLSClientConfig: tc}}
	}
	call := func(c *http.Client, method, path, body string) (int, string) {
		req, err := http.NewRequest(method, base+path, strings.NewReader(body))
		require.NoError(t, err)
		resp, err := c.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, string(b)
	}
	nodeA := client(ca.Issue(t, "node-a", x509.ExtKeyUsageClientAuth))
	nodeC := client(ca.IssueURIs(t, "ignored-cn", []string{"urn:sharedcontent:node:node-c"}, x509.ExtKeyUsageClientAuth))
	admin := client(ca.IssueURIs(t, "ops", []string{"urn:sharedcontent:admin"}, x509.ExtKeyUsageClientAuth))

	_, err := client(nil, nil).Get(base + "/nodes")
	require.Error(t, err, "a client without a certificate is refused")

	code, body := call(nodeA, http.MethodPost, "/refs/add", `{"resource_id":"`+blob+`","node_id":"node-a"}`)
	require.Equal(t, http.StatusOK, code, body)
	code, body = call(nodeA, http.MethodPost, "/lock", `{"type":"delete","resource_id":"`+blob+`","node_id":"node-c"}`)
	require.Equal(t, http.StatusForbidden, code, "node-a's certificate acting as node-c: %s", body)
	require.Contains(t, body, api.CodeForbidden)
	code, body = call(nodeC, http.MethodPost, "/lock", `{"type":"delete","resource_id":"`+blob+`","node_id":"node-a"}`)
	require.Equal(t, http.StatusForbidden, code, "the URI SAN names node-c, not its CN: %s", body)
	code, body = call(nodeC, http.MethodPost, "/refs/add", `{"resource_id":"`+blob+`"}`)
	require.Equal(t, http.StatusOK, code, "an omitted node_id is the certificate's node: %s", body)

	code, body = call(nodeA, http.MethodDelete, "/nodes/gone", "")
	require.Equal(t, http.StatusForbidden, code, "a node is not the admin: %s", body)
	code, body = call(admin, http.MethodDelete, "/nodes/gone", "")
	require.Equal(t, http.StatusNotFound, code, "let through: gone never joined: %s", body)

	refs, err := ts.Coordinator.Refs(t.Context(), blob)
	require.NoError(t, err)
	require.Equal(t, []string{"node-a", "node-c"}, refs.Nodes)
}
