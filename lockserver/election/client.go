package election

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/containerd/log"
	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// dialTimeout bounds the etcd client's connection to an endpoint, and
// the certificate check of each endpoint at start.
const dialTimeout = 5 * time.Second

// tlsFlags reports whether any of etcd's TLS files is set.
func (o Options) tlsFlags() bool { return o.CACert != "" || o.Cert != "" || o.Key != "" }

// validateTLS checks that the TLS files come as etcdctl takes them (a
// certificate with its key) and that no endpoint is http:// when TLS is
// asked for (etcd's client would speak plain HTTP to it).
func (o Options) validateTLS() error {
	if (o.Cert == "") != (o.Key == "") {
		return errors.New("--etcd-cert and --etcd-key go together")
	}
	for _, e := range o.Endpoints {
		if o.tlsFlags() && strings.HasPrefix(e, "http://") {
			return fmt.Errorf("--etcd-endpoints: %q is http://, but --etcd-cacert, --etcd-cert or --etcd-key ask for TLS: use https://", e)
		}
	}
	return nil
}

// TLSConfig returns the client TLS configuration of etcd's endpoints (go.etcd.io/etcd/client/pkg/v3/transport.TLSInfo,
// as etcdctl builds it), or nil when the endpoints are not https://. A
// file that cannot be read or parsed is an error naming its flag.
func (o Options) TLSConfig() (*tls.Config, error) {
	https := o.tlsFlags()
	for _, e := range o.Endpoints {
		https = https || strings.HasPrefix(e, "https://")
	}
	if !https {
		return nil, nil
	}
	for _, f := range []struct{ flag, path string }{{"--etcd-cacert", o.CACert}, {"--etcd-cert", o.Cert}, {"--etcd-key", o.Key}} {
		if f.path == "" {
			continue
		}
		if _, err := os.Stat(f.path); err != nil {
			return nil, fmt.Errorf("%s: %w", f.flag, err)
		}
	}
	info := transport.TLSInfo{CertFile: o.Cert, KeyFile: o.Key, TrustedCAFile: o.CACert}
	if info.Empty() && o.CACert == "" {
		return &tls.Config{MinVersion: tls.VersionTLS12}, nil // the system's roots
	}
	cfg, err := info.ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("etcd client TLS (--etcd-cacert %q, --etcd-cert %q, --etcd-key %q): %w", o.CACert, o.Cert, o.Key, err)
	}
	return cfg, nil
}

// NewClient returns a client of o's etcd endpoints (with o's TLS). Over
// TLS it first checks the certificate of every endpoint that answers in
// time: one that does not verify against --etcd-cacert (or the system's
// roots), or an endpoint that refuses the replica's client certificate
// (or its lack of one), is a configuration error, and the replica does
// not start. An
// endpoint that does not answer is left to the election loop, which
// retries (etcd may start later) and answers unavailable meanwhile.
func NewClient(ctx context.Context, o Options) (*clientv3.Client, error) {
	cfg, err := o.TLSConfig()
	if err != nil {
		return nil, err
	}
	if cfg != nil {
		if err := checkCerts(ctx, o.Endpoints, cfg); err != nil {
			return nil, err
		}
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: o.Endpoints, DialTimeout: dialTimeout, TLS: cfg})
	if err != nil {
		return nil, fmt.Errorf("etcd client: %w", err)
	}
	return cli, nil
}

// checkCerts makes a TLS handshake with every https endpoint: an
// endpoint whose certificate does not verify, or that refuses the client
// certificate, is an error; one that cannot be reached is logged.
func checkCerts(ctx context.Context, endpoints []string, cfg *tls.Config) error {
	for _, e := range endpoints {
		addr, ok := tlsAddress(e)
		if !ok {
			continue
		}
		host, _, err := net.SplitHostPort(addr)
		if err != nil {
			continue // no port: left to etcd's client
		}
		c := cfg.Clone()
		if c.ServerName == "" {
			c.ServerName = host
		}
		d := tls.Dialer{NetDialer: &net.Dialer{Timeout: dialTimeout}, Config: c}
		dctx, cancel := context.WithTimeout(ctx, dialTimeout)
		conn, err := d.DialContext(dctx, "tcp", addr)
		cancel()
		var badCert *tls.CertificateVerificationError
		switch {
		case errors.As(err, &badCert):
			return fmt.Errorf("etcd endpoint %s: its certificate does not verify (check --etcd-cacert): %w", e, err)
		case err != nil:
			log.G(ctx).WithError(err).WithField("endpoint", e).Warn("etcd endpoint not reachable at start; its certificate is not checked")
		default:
			err := checkAccepted(conn)
			conn.Close()
			if err != nil {
				return fmt.Errorf("etcd endpoint %s refused this replica's client certificate (check --etcd-cert and --etcd-key against etcd's --trusted-ca-file): %w", e, err)
			}
		}
	}
	return nil
}

// acceptedWait bounds the wait, after a handshake, for the server's
// first bytes or its refusal.
const acceptedWait = 2 * time.Second

// checkAccepted tells whether the server refused the client certificate
// of conn's handshake. Under TLS 1.3 the server checks it after the
// client's side of the handshake is done, and a refusal arrives as an
// alert on the first read; etcd's gRPC server otherwise speaks first (its
// HTTP/2 settings). Only an alert is an error: silence or another read
// error is left to etcd's client.
func checkAccepted(conn net.Conn) error {
	if err := conn.SetReadDeadline(time.Now().Add(acceptedWait)); err != nil {
		return nil
	}
	var b [1]byte
	_, err := conn.Read(b[:])
	var opErr *net.OpError
	if errors.As(err, &opErr) && opErr.Op == "remote error" {
		return err
	}
	return nil
}

// tlsAddress returns the host:port of an endpoint that etcd's client
// reaches over TLS when it has a TLS configuration: https://host:port, or
// a bare host:port.
func tlsAddress(endpoint string) (string, bool) {
	if rest, ok := strings.CutPrefix(endpoint, "https://"); ok {
		u, err := url.Parse("https://" + rest)
		if err != nil {
			return "", false
		}
		return u.Host, true
	}
	if strings.Contains(endpoint, "://") || strings.HasPrefix(endpoint, "unix") {
		return "", false
	}
	return endpoint, true
}
