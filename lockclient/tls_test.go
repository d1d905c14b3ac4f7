package lockclient

import (
	"context"
	"crypto/tls"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sharedcontent/sharedcontent/internal/testutil/members"
	"github.com/sharedcontent/sharedcontent/internal/testutil/testca"
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
	members.Open(t, ts.Core(), "node-a", "node-b")
	queued := make(chan struct{}, 1)
	waiter.http.onQueued = func(api.LockRequest) { queued <- struct{}{} }
	req := api.LockRequest{Type: api.OperationPull, ResourceID: blob}

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

// TestNodeIdentity (docs/design.md §9): against a coordinator that knows each node
// by its client certificate, or by its own token, a client with its
// node's credentials locks, waits on its event stream and unlocks; one
// acting as another node is refused with ErrForbidden.
func TestNodeIdentity(t *testing.T) {
	ca := testca.New(t)
	tokens := map[string]string{"node-a": "tok-a", "node-b": "tok-b", "node-c": "tok-c"}
	for _, tc := range []struct {
		name  string
		start func(t *testing.T) *lockservertest.Server
		// as returns the option of node's credentials.
		as func(t *testing.T, ts *lockservertest.Server, node string) Option
	}{
		{"mtls", func(t *testing.T) *lockservertest.Server {
			return lockservertest.Start(t, lockservertest.WithNodeIdentity(ca))
		}, func(t *testing.T, ts *lockservertest.Server, node string) Option {
			return WithTLSConfig(ts.ClientTLS(t, node))
		}},
		{"node tokens", func(t *testing.T) *lockservertest.Server {
			return lockservertest.Start(t, lockservertest.WithNodeTokens(tokens))
		}, func(_ *testing.T, _ *lockservertest.Server, node string) Option {
			return WithBearerToken(tokens[node])
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ts := tc.start(t)
			holder := newHTTPClient(t, ts.URL(), "node-a", tc.as(t, ts, "node-a"))
			waiter := newHTTPClient(t, ts.URL(), "node-b", tc.as(t, ts, "node-b"))
			members.Open(t, ts.Core(), "node-a", "node-b")
			queued := make(chan struct{}, 1)
			waiter.http.onQueued = func(api.LockRequest) { queued <- struct{}{} }
			req := api.LockRequest{Type: api.OperationPull, ResourceID: blob}

			res, err := holder.Lock(context.Background(), req)
			require.NoError(t, err)
			require.True(t, res.Acquired)
			ch := lockAsync(context.Background(), waiter, req)
			signalled(t, queued) // waiting on its event stream
			require.NoError(t, holder.Unlock(context.Background(), res.Lease, true, nil))
			o := recv(t, ch)
			require.NoError(t, o.err)
			require.True(t, o.res.Skipped)

			impostor := newHTTPClient(t, ts.URL(), "node-a", tc.as(t, ts, "node-c"), WithMaxRetries(3))
			_, err = impostor.Lock(context.Background(), api.LockRequest{Type: api.OperationPull, ResourceID: blob + "-other"})
			require.ErrorIs(t, err, api.ErrForbidden, "node-c's credentials acting as node-a")
		})
	}
}
