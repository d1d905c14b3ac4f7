package lockclient

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
)

// TLSConfigFromFiles is a node's TLS configuration for an https
// coordinator, from PEM files: caFile, the CA that signed the
// coordinator's certificate (empty: the system's roots), and certFile and
// keyFile, this node's client certificate for a coordinator that requires
// mTLS (empty: none). It is nil, and the client's default used, when
// caFile and certFile are both empty. The daemon's --coordinator-ca,
// --node-cert and --node-key and the compiled-in plugin's ca_file,
// node_cert and node_key are read this way.
func TLSConfigFromFiles(caFile, certFile, keyFile string) (*tls.Config, error) {
	if caFile == "" && certFile == "" {
		return nil, nil
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, fmt.Errorf("coordinator CA: %w", err)
		}
		tc.RootCAs = x509.NewCertPool()
		if !tc.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("coordinator CA %s: no certificate found", caFile)
		}
	}
	if certFile != "" {
		pair, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, fmt.Errorf("lock client certificate: %w", err)
		}
		tc.Certificates = []tls.Certificate{pair}
	}
	return tc, nil
}
