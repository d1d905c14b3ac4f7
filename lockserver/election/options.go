package election

import (
	"errors"
	"flag"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/sharedcontent/sharedcontent/refcount/etcdstore"
)

const (
	// DefaultPrefix is the etcd key prefix of the coordinator's state.
	DefaultPrefix = "/sharedcontent/"
	// DefaultSessionTTL is the etcd session's lease TTL: how long a
	// leader that stopped (or lost etcd) holds the election at most.
	DefaultSessionTTL = 5 * time.Second
	// minSessionTTL leaves the watchdog (keepalive.go) room below the TTL.
	minSessionTTL = 2 * time.Second
)

// Options configure a replica. Zero Endpoints: no election (a single
// coordinator on bbolt).
type Options struct {
	// Endpoints are the etcd client URLs.
	Endpoints []string
	// Prefix is the key prefix of the state; the election lives under
	// it, at "leader/".
	Prefix string
	// AdvertiseURL is this replica's URL as clients reach it: a standby
	// names the leader by it.
	AdvertiseURL string
	// SessionTTL is the etcd session's lease TTL, in whole seconds.
	SessionTTL time.Duration
	// CACert, Cert and Key are the PEM files of etcd's client TLS (the
	// names etcdctl gives them: --cacert, --cert, --key): the CA that
	// etcd's server certificates chain to, and this replica's client
	// certificate and key, for etcd's --client-cert-auth. Any of them
	// asks for TLS, which needs https:// endpoints; https:// endpoints
	// without a CA verify etcd against the system's roots.
	CACert, Cert, Key string
	// FlushInterval is how long the leader's writes wait at most to share
	// one etcd transaction (group commit, docs/design.md §7.1); negative
	// sends each batch alone. Zero picks etcdstore.DefaultFlushInterval.
	FlushInterval time.Duration
}

// DefaultOptions returns the defaults: no endpoints.
func DefaultOptions() Options {
	return Options{Prefix: DefaultPrefix, SessionTTL: DefaultSessionTTL, FlushInterval: etcdstore.DefaultFlushInterval}
}

// Enabled reports whether the options ask for a replica.
func (o Options) Enabled() bool { return len(o.Endpoints) > 0 }

// RegisterFlags binds o's fields to flags on fs, with o's values as
// defaults (the flags of httpserver.RegisterFlags' style).
func RegisterFlags(fs *flag.FlagSet, o *Options) {
	fs.Func("etcd-endpoints", "comma-separated etcd client URLs: run as one replica of a coordinator whose state lives in etcd, leading while it wins the election (empty: a single coordinator on the data directory's bbolt)", func(s string) error {
		o.Endpoints = nil
		for _, e := range strings.Split(s, ",") {
			if e = strings.TrimSpace(e); e != "" {
				o.Endpoints = append(o.Endpoints, e)
			}
		}
		return nil
	})
	fs.StringVar(&o.Prefix, "etcd-prefix", o.Prefix, "etcd key prefix of the coordinator's state and election")
	fs.StringVar(&o.AdvertiseURL, "advertise-url", o.AdvertiseURL, "this replica's URL as clients reach it (required with --etcd-endpoints): standbys send clients to the leader's")
	fs.DurationVar(&o.FlushInterval, "etcd-flush-interval", o.FlushInterval, "how long the leader's writes wait at most to share one etcd transaction (group commit; they also go at 128 operations or about 1 MiB); negative sends each batch in its own transaction")
	fs.StringVar(&o.CACert, "etcd-cacert", o.CACert, "CA certificate (PEM) that etcd's server certificates must chain to (TLS to etcd; needs https:// endpoints; empty with https:// endpoints: the system's roots)")
	fs.StringVar(&o.Cert, "etcd-cert", o.Cert, "client certificate (PEM) this replica presents to etcd (etcd's --client-cert-auth); needs --etcd-key")
	fs.StringVar(&o.Key, "etcd-key", o.Key, "private key (PEM) of --etcd-cert")
	fs.DurationVar(&o.SessionTTL, "etcd-session-ttl", o.SessionTTL, "the replica's etcd session lease, whole seconds, at least 2s: a leader stops answering 1s before its lease may lapse, and a dead leader is replaced within about this long")
}

// Validate checks the options; Options without endpoints are valid when
// they ask for nothing else of a replica.
func (o Options) Validate() error {
	if !o.Enabled() {
		if o.AdvertiseURL != "" {
			return errors.New("--advertise-url needs --etcd-endpoints")
		}
		if o.tlsFlags() {
			return errors.New("--etcd-cacert, --etcd-cert and --etcd-key need --etcd-endpoints")
		}
		return nil
	}
	if err := o.validateTLS(); err != nil {
		return err
	}
	if o.AdvertiseURL == "" {
		return errors.New("--etcd-endpoints needs --advertise-url (this replica's URL as clients reach it)")
	}
	if err := checkURL(o.AdvertiseURL); err != nil {
		return fmt.Errorf("--advertise-url: %w", err)
	}
	if o.Prefix == "" {
		return errors.New("--etcd-prefix must not be empty")
	}
	if o.SessionTTL < minSessionTTL || o.SessionTTL%time.Second != 0 {
		return fmt.Errorf("--etcd-session-ttl %v: must be whole seconds, at least %v", o.SessionTTL, minSessionTTL)
	}
	return nil
}

// checkURL accepts an http(s) URL with a host and no query or fragment.
func checkURL(s string) error {
	u, err := url.Parse(s)
	if err != nil {
		return err
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		return fmt.Errorf("%q is not an http(s) URL with a host (and no query)", s)
	}
	return nil
}
