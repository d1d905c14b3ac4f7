package lockclient

import (
	"context"
	"crypto/tls"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sharedcontent/sharedcontent/integration/testca"
	"github.com/sharedcontent/sharedcontent/lockserver/api"
	"github.com/sharedcontent/sharedcontent/lockserver/lockservertest"
)

// TestTLSWithToken: over HTTPS with a bearer token, both the short
// requests and the event stream of a waiter work with WithTLSConfig.
func TestTLSWithToken(t *testing.T) {
	ts := lockservertest.Start(t, lockservertest.WithTLS(testca.New(t)), lockservertest.WithToken("s3cret"))
	url := ts.URL()
	require.Equal(t, "https://"+ts.Addr(), url)
	tc := ts.ClientTLS(t, "")

	holder := newHTTPClient(t, url, "node-a", WithTLSConfig(tc), WithBearerToken("s3cret"))
	waiter := newHTTPClient(t, url, "node-b", WithTLSConfig(tc), WithBearerToken("s3cret"))
	queued := make(chan struct{}, 1)
	waiter.http.onQueued = func(api.LockRequest) { queued <- struct{}{} }
	req := Request{Type: OperationTypePull, ResourceID: blob}

	res, err := holder.Lock(context.Background(), req)
	require.NoError(t, err)
	require.True(t, res.Acquired)
	ch := lockAsync(context.Background(), waiter, req)
	signalled(t, queued) // waiting on its event stream
	require.NoError(t, holder.Unlock(context.Background(), res.Lease, true, nil))
	o := recv(t, ch)
	require.NoError(t, o.err)
	require.True(t, o.res.Skipped)

	// Without the CA the server is not trusted: a configuration error,
	// not retried.
	ct := newCountingClient(t, url)
	untrusting := newHTTPClient(t, url, "node-c", WithBearerToken("s3cret"), WithMaxRetries(3), WithShortClient(ct))
	_, err = untrusting.Refs(context.Background(), blob)
	var badCert *tls.CertificateVerificationError
	require.ErrorAs(t, err, &badCert)
	require.Equal(t, 1, ct.count("GET /refs"))
}
