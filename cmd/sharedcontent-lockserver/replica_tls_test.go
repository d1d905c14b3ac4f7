package main

// Replicas that reach etcd over TLS with a client certificate
// (--etcd-cacert, --etcd-cert, --etcd-key; docs/operations.md, "etcd").

import (
	"context"
	"crypto/x509"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sharedcontent/sharedcontent/internal/testutil/etcdtest"
	"github.com/sharedcontent/sharedcontent/internal/testutil/testca"
)

// TestReplicaOverTLS: a replica given etcd's CA and a client certificate
// leads a TLS cluster that demands client certificates, and a client
// holding its URL has its session and lock cycle. A replica whose CA does
// not verify etcd's certificate, or whose file is missing, does not
// start, and says why.
func TestReplicaOverTLS(t *testing.T) {
	etcd := etcdtest.Start(t, etcdtest.Options{Members: 1, TLS: true})
	files := etcd.TLS()
	tlsArgs := []string{"--etcd-cacert", files.CACert, "--etcd-cert", files.Cert, "--etcd-key", files.Key}
	reps := startReplicasArgs(t, [][]string{etcd.Endpoints()}, replicaTTL, tlsArgs...)
	leader := waitLeader(t, reps)
	client := replicaClient(t, "node-a", reps)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	require.NoError(t, cycleAndAdd(ctx, client, "blob-tls"))
	require.True(t, leader.ready())

	dir := t.TempDir()
	otherCA := testca.WriteFile(t, dir, "other-ca.pem", testca.New(t).PEM)
	otherCert, otherKey := testca.New(t).Issue(t, "stranger", x509.ExtKeyUsageClientAuth)
	base := []string{"--listen", "127.0.0.1:0", "--etcd-endpoints", strings.Join(etcd.Endpoints(), ","),
		"--advertise-url", "http://127.0.0.1:1", "--data-dir", filepath.Join(dir, "unused")}
	for _, tc := range []struct {
		name, want string
		args       []string
	}{
		{"wrong CA", "its certificate does not verify (check --etcd-cacert)",
			[]string{"--etcd-cacert", otherCA, "--etcd-cert", files.Cert, "--etcd-key", files.Key}},
		{"missing CA", "--etcd-cacert: stat " + filepath.Join(dir, "missing.pem"),
			[]string{"--etcd-cacert", filepath.Join(dir, "missing.pem"), "--etcd-cert", files.Cert, "--etcd-key", files.Key}},
		{"missing key", "--etcd-key: stat " + filepath.Join(dir, "missing-key.pem"),
			[]string{"--etcd-cacert", files.CACert, "--etcd-cert", files.Cert, "--etcd-key", filepath.Join(dir, "missing-key.pem")}},
		{"certificate without key", "--etcd-cert and --etcd-key go together",
			[]string{"--etcd-cacert", files.CACert, "--etcd-cert", files.Cert}},
		{"key of another certificate", "etcd client TLS",
			[]string{"--etcd-cacert", files.CACert, "--etcd-cert", testca.WriteFile(t, dir, "other.pem", otherCert), "--etcd-key", files.Key}},
		// etcd refuses it after the handshake, with an alert on the
		// first read: before, the replica started, led nothing and said
		// only that it could not reach etcd.
		{"client certificate of another CA", "refused this replica's client certificate (check --etcd-cert and --etcd-key",
			[]string{"--etcd-cacert", files.CACert, "--etcd-cert", testca.WriteFile(t, dir, "stranger.pem", otherCert),
				"--etcd-key", testca.WriteFile(t, dir, "stranger-key.pem", otherKey)}},
		{"no client certificate", "refused this replica's client certificate",
			[]string{"--etcd-cacert", files.CACert}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := run(append(append([]string(nil), base...), tc.args...))
			require.ErrorContains(t, err, tc.want)
		})
	}
	err := run([]string{"--listen", "127.0.0.1:0", "--etcd-endpoints", strings.Replace(etcd.Endpoint(0), "https://", "http://", 1),
		"--advertise-url", "http://127.0.0.1:1", "--etcd-cacert", files.CACert})
	require.ErrorContains(t, err, "use https://", "TLS asked for with an http:// endpoint")

}

// TestParseEtcdTLSFlags: the TLS files of etcd come as flags or as
// environment variables, like every other flag.
func TestParseEtcdTLSFlags(t *testing.T) {
	t.Setenv("SHAREDCONTENT_ETCD_CACERT", "/etc/etcd/ca.pem")
	t.Setenv("SHAREDCONTENT_ETCD_CERT", "/etc/etcd/client.pem")
	o, err := parse([]string{"--etcd-endpoints", "https://e0:2379", "--advertise-url", "http://c0:8642", "--etcd-key", "/etc/etcd/client-key.pem"})
	require.NoError(t, err)
	require.Equal(t, "/etc/etcd/ca.pem", o.etcd.CACert)
	require.Equal(t, "/etc/etcd/client.pem", o.etcd.Cert)
	require.Equal(t, "/etc/etcd/client-key.pem", o.etcd.Key)
	_, err = parse(nil)
	require.ErrorContains(t, err, "need --etcd-endpoints", "TLS files without endpoints")
}
