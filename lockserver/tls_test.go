package lockserver

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

	"github.com/sharedcontent/sharedcontent/integration/testca"
)

func TestMutualTLS(t *testing.T) {
	dir := t.TempDir()
	ca := testca.New(t)
	sc, sk := ca.Issue(t, "server", x509.ExtKeyUsageServerAuth)
	ts := startServer(t, dir, func(c *ServerConfig) {
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
	for _, path := range []string{"/lock/subscribe?type=pull&resource_id=" + blob + "&request_id=unknown", "/healthz"} {
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
