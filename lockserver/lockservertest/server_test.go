package lockservertest_test

import (
	"context"
	"crypto/tls"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sharedcontent/sharedcontent/internal/testutil/members"
	"github.com/sharedcontent/sharedcontent/internal/testutil/testca"
	"github.com/sharedcontent/sharedcontent/lockserver"
	"github.com/sharedcontent/sharedcontent/lockserver/httpserver"
	"github.com/sharedcontent/sharedcontent/lockserver/lockservertest"
)

const blob = "sha256:aaaa"

// get sends GET url with client and returns the status code.
func get(t *testing.T, client *http.Client, url, token string) int {
	t.Helper()
	return call(t, client, http.MethodGet, url, token, "")
}

// call sends a request with client, and token as bearer token when set,
// and returns the status code.
func call(t *testing.T, client *http.Client, method, url, token, body string) int {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	require.NoError(t, err)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := client.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	return resp.StatusCode
}

// refsAdd is the body of POST /refs/add for blob as node.
func refsAdd(node string) string { return `{"resource_id":"` + blob + `","node_id":"` + node + `"}` }

// TestStartRestartWipe: a coordinator keeps its address and references
// across a restart, and loses them (a new cluster) when wiped.
func TestStartRestartWipe(t *testing.T) {
	ctx := context.Background()
	c := lockservertest.Start(t)
	require.Equal(t, "http://"+c.Addr(), c.URL())
	require.Equal(t, http.StatusOK, get(t, http.DefaultClient, c.URL()+"/refs?resource_id="+blob, ""))
	require.Positive(t, c.Accepted())
	members.Open(t, c.Core(), "node-a")
	_, err := c.Core().AddRef(ctx, blob, "node-a")
	require.NoError(t, err)
	cluster := c.Core().Cluster()

	c.Restart()
	require.True(t, c.Running())
	refs, err := c.Core().Refs(ctx, blob)
	require.NoError(t, err)
	require.Equal(t, []string{"node-a"}, refs.Nodes, "references survive a restart")
	require.Equal(t, cluster.ClusterID, c.Core().Cluster().ClusterID)
	require.Equal(t, http.StatusOK, get(t, http.DefaultClient, c.URL()+"/healthz", ""), "served on the same address")

	c.Wipe()
	refs, err = c.Core().Refs(ctx, blob)
	require.NoError(t, err)
	require.Empty(t, refs.Nodes, "a wiped coordinator knows no reference")
	require.NotEqual(t, cluster.ClusterID, c.Core().Cluster().ClusterID, "a wiped coordinator is a new cluster")

	c.Stop()
	require.False(t, c.Running())
	c.Stop() // idempotent
}

// TestOptions: WithConfig, WithServerConfig and WithToken reach the server.
func TestOptions(t *testing.T) {
	cfg := lockserver.DefaultConfig()
	cfg.UpdateRequiresNoRef = true
	var seen httpserver.Config
	c := lockservertest.Start(t, lockservertest.WithConfig(cfg), lockservertest.WithToken("s3cret"),
		lockservertest.WithServerConfig(func(sc *httpserver.Config) { seen = *sc }))
	require.True(t, c.Config().UpdateRequiresNoRef)
	require.Equal(t, c.Config(), seen, "WithServerConfig sees the final configuration")
	require.NotEmpty(t, c.Config().AuthTokenFile)
	require.Equal(t, http.StatusUnauthorized, get(t, http.DefaultClient, c.URL()+"/refs?resource_id="+blob, ""))
	require.Equal(t, http.StatusOK, get(t, http.DefaultClient, c.URL()+"/refs?resource_id="+blob, "s3cret"))
}

// TestTLS: WithTLS serves HTTPS that ClientTLS trusts; WithMTLS also
// wants a client certificate of the CA.
func TestTLS(t *testing.T) {
	client := func(tc *tls.Config) *http.Client {
		tr := &http.Transport{TLSClientConfig: tc}
		t.Cleanup(tr.CloseIdleConnections)
		return &http.Client{Transport: tr}
	}
	t.Run("tls", func(t *testing.T) {
		c := lockservertest.Start(t, lockservertest.WithTLS(testca.New(t)))
		require.Equal(t, "https://"+c.Addr(), c.URL())
		require.Equal(t, http.StatusOK, get(t, client(c.ClientTLS(t, "")), c.URL()+"/healthz", ""))
	})
	t.Run("mtls", func(t *testing.T) {
		c := lockservertest.Start(t, lockservertest.WithMTLS(testca.New(t)))
		require.Equal(t, http.StatusOK, get(t, client(c.ClientTLS(t, "node-a")), c.URL()+"/healthz", ""))
		_, err := client(c.ClientTLS(t, "")).Get(c.URL() + "/healthz")
		require.Error(t, err, "no client certificate")
	})
}

// TestDataDir: a coordinator started WithDataDir on the directory a
// stopped one left has its references.
func TestDataDir(t *testing.T) {
	ctx := context.Background()
	first := lockservertest.Start(t)
	members.Open(t, first.Core(), "node-a")
	_, err := first.Core().AddRef(ctx, blob, "node-a")
	require.NoError(t, err)
	first.Stop()
	second := lockservertest.Start(t, lockservertest.WithDataDir(first.DataDir()))
	refs, err := second.Core().Refs(ctx, blob)
	require.NoError(t, err)
	require.Equal(t, []string{"node-a"}, refs.Nodes)
}

// TestNodeTokens: WithNodeTokens gives each node its token, and a node
// may act only as itself.
func TestNodeTokens(t *testing.T) {
	c := lockservertest.Start(t, lockservertest.WithNodeTokens(map[string]string{"node-a": "tok-a", "node-b": "tok-b"}))
	require.NotEmpty(t, c.Config().NodeTokensFile)
	members.Open(t, c.Core(), "node-a", "node-b")
	require.Equal(t, http.StatusUnauthorized, call(t, http.DefaultClient, http.MethodPost, c.URL()+"/refs/add", "", refsAdd("node-a")))
	require.Equal(t, http.StatusOK, call(t, http.DefaultClient, http.MethodPost, c.URL()+"/refs/add", "tok-a", refsAdd("node-a")))
	require.Equal(t, http.StatusForbidden, call(t, http.DefaultClient, http.MethodPost, c.URL()+"/refs/add", "tok-b", refsAdd("node-a")))
}

// TestNodeIdentity: with WithNodeIdentity a client certificate from
// ClientTLS names its node, by common name or URI SAN.
func TestNodeIdentity(t *testing.T) {
	c := lockservertest.Start(t, lockservertest.WithNodeIdentity(testca.New(t)))
	require.True(t, c.Config().TLSNodeIdentity)
	members.Open(t, c.Core(), "node-a", "node-b")
	client := func(tc *tls.Config) *http.Client {
		tr := &http.Transport{TLSClientConfig: tc}
		t.Cleanup(tr.CloseIdleConnections)
		return &http.Client{Transport: tr}
	}
	nodeA := client(c.ClientTLS(t, "node-a"))
	nodeB := client(c.ClientTLS(t, "ignored-cn", "urn:sharedcontent:node:node-b"))
	require.Equal(t, http.StatusOK, call(t, nodeA, http.MethodPost, c.URL()+"/refs/add", "", refsAdd("node-a")))
	require.Equal(t, http.StatusForbidden, call(t, nodeA, http.MethodPost, c.URL()+"/refs/add", "", refsAdd("node-b")))
	require.Equal(t, http.StatusOK, call(t, nodeB, http.MethodPost, c.URL()+"/refs/add", "", refsAdd("node-b")))
	_, err := client(c.ClientTLS(t, "")).Get(c.URL() + "/healthz")
	require.Error(t, err, "no client certificate")
}

// TestNewCoordinatorAndServeHandler: an in-memory Coordinator served by a bare
// Handler answers over HTTP.
func TestNewCoordinatorAndServeHandler(t *testing.T) {
	l := lockservertest.NewCoordinator(t)
	members.Open(t, l, "node-a")
	_, err := l.AddRef(context.Background(), blob, "node-a")
	require.NoError(t, err)
	url := lockservertest.ServeHandler(t, httpserver.NewHandler(l), nil)
	require.Equal(t, http.StatusOK, get(t, http.DefaultClient, url+"/refs?resource_id="+blob, ""))
}
