package etcdtest

import (
	"crypto/tls"
	"crypto/x509"
	"testing"

	"github.com/sharedcontent/sharedcontent/internal/testutil/testca"
)

// security is a TLS cluster's CA and certificates, made once per Start.
type security struct {
	ca             *testca.CA
	server, client TLSFiles
	config         *tls.Config // the harness's own clients'
}

// newSecurity makes a CA and, under a directory of the test's, the
// members' certificate and a client's. The members' certificate is for
// any use: etcd's gateway dials the member with it as a client.
func newSecurity(t testing.TB) *security {
	t.Helper()
	dir := t.TempDir()
	ca := testca.New(t)
	caPath := testca.WriteFile(t, dir, "ca.pem", ca.PEM)
	srvCert, srvKey := ca.Issue(t, "etcd member", x509.ExtKeyUsageAny)
	cliCert, cliKey := ca.Issue(t, "etcd client", x509.ExtKeyUsageClientAuth)
	pair, err := tls.X509KeyPair(cliCert, cliKey)
	if err != nil {
		t.Fatalf("etcdtest: client key pair: %v", err)
	}
	return &security{
		ca: ca,
		server: TLSFiles{CACert: caPath, Cert: testca.WriteFile(t, dir, "member.pem", srvCert),
			Key: testca.WriteFile(t, dir, "member-key.pem", srvKey)},
		client: TLSFiles{CACert: caPath, Cert: testca.WriteFile(t, dir, "client.pem", cliCert),
			Key: testca.WriteFile(t, dir, "client-key.pem", cliKey)},
		config: &tls.Config{RootCAs: ca.Pool(), Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12},
	}
}
