package lockservertest

import (
	"crypto/tls"
	"crypto/x509"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sharedcontent/sharedcontent/internal/testutil/testca"
)

// serverCert issues the server's certificate for 127.0.0.1 and writes it
// and its key under dir.
func serverCert(t testing.TB, ca *testca.CA, dir string) (certFile, keyFile string) {
	t.Helper()
	cert, key := ca.Issue(t, "lockserver", x509.ExtKeyUsageServerAuth)
	return testca.WriteFile(t, dir, "server.crt", cert), testca.WriteFile(t, dir, "server.key", key)
}

// ClientTLS returns a client configuration that trusts the coordinator's
// CA (WithTLS, WithMTLS, WithNodeIdentity) and, when cn is not empty,
// presents a client certificate issued by that CA to cn, with uris as its
// URI SANs (with WithNodeIdentity, urn:sharedcontent:node:ID names the
// node over cn, and urn:sharedcontent:admin makes it the admin). Without a
// CA it fails the test.
func (c *Server) ClientTLS(t testing.TB, cn string, uris ...string) *tls.Config {
	t.Helper()
	require.NotNil(t, c.ca, "the coordinator serves plain HTTP (no WithTLS)")
	tc := &tls.Config{RootCAs: c.ca.Pool(), MinVersion: tls.VersionTLS12}
	if cn != "" {
		certPEM, keyPEM := c.ca.IssueURIs(t, cn, uris, x509.ExtKeyUsageClientAuth)
		cert, err := tls.X509KeyPair(certPEM, keyPEM)
		require.NoError(t, err)
		tc.Certificates = []tls.Certificate{cert}
	}
	return tc
}
