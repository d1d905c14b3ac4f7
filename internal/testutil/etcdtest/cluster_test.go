package etcdtest_test

import (
	"context"
	"crypto/tls"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/sharedcontent/sharedcontent/internal/testutil/etcdtest"
)

// TestCluster: the three members form one cluster, which keeps its quorum
// with one member killed or its leader stopped, and a restarted member
// catches up.
func TestCluster(t *testing.T) {
	c := etcdtest.Start(t, etcdtest.Options{})
	require.Len(t, c.Endpoints(), 3)
	ctx := t.Context()
	_, err := c.ClientOf(t, c.Endpoint(0)).Put(ctx, "k", "v1")
	require.NoError(t, err)
	for i := range 3 {
		resp, err := c.ClientOf(t, c.Endpoint(i)).Get(ctx, "k")
		require.NoError(t, err)
		require.Len(t, resp.Kvs, 1, "member %d", i)
		require.Equal(t, "v1", string(resp.Kvs[0].Value))
	}
	c.Kill(2)
	// A write sent while the killed member was the leader may be lost
	// with it (etcd answers "request timed out"): wait for a leader.
	c.WaitHealthy(t)
	_, err = c.ClientOf(t, c.Endpoint(1)).Put(ctx, "k", "v2")
	require.NoError(t, err, "two of three members are a quorum")
	c.Restart(t, 2)
	c.WaitHealthy(t)
	resp, err := c.ClientOf(t, c.Endpoint(2)).Get(ctx, "k")
	require.NoError(t, err)
	require.Equal(t, "v2", string(resp.Kvs[0].Value), "the restarted member caught up")

	// The leader stopped gracefully hands over; it comes back as well.
	leader := c.Leader(t)
	c.Stop(leader)
	c.WaitHealthy(t)
	other := (leader + 1) % 3
	require.NotEqual(t, leader, c.Leader(t))
	_, err = c.ClientOf(t, c.Endpoint(other)).Put(ctx, "k", "v3")
	require.NoError(t, err)
	c.Restart(t, leader)
	c.WaitHealthy(t)
	resp, err = c.ClientOf(t, c.Endpoint(leader)).Get(ctx, "k")
	require.NoError(t, err)
	require.Equal(t, "v3", string(resp.Kvs[0].Value))
}

// TestTLSCluster: a TLS cluster serves https:// client URLs to a client
// with the test's certificates, and refuses one without a client
// certificate.
func TestTLSCluster(t *testing.T) {
	c := etcdtest.Start(t, etcdtest.Options{Members: 1, TLS: true})
	require.True(t, strings.HasPrefix(c.Endpoint(0), "https://"), c.Endpoint(0))
	files := c.TLS()
	for _, f := range []string{files.CACert, files.Cert, files.Key} {
		require.FileExists(t, f)
	}
	ctx := t.Context()
	_, err := c.Client(t).Put(ctx, "k", "v")
	require.NoError(t, err)

	anonymous, err := clientv3.New(clientv3.Config{Endpoints: c.Endpoints(), DialTimeout: 5 * time.Second,
		TLS: &tls.Config{RootCAs: c.CA().Pool(), MinVersion: tls.VersionTLS12}, Logger: zap.NewNop()})
	require.NoError(t, err)
	defer anonymous.Close()
	gctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_, err = anonymous.Get(gctx, "k")
	require.Error(t, err, "a client without a certificate is refused (--client-cert-auth)")
}
