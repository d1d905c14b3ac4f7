package lockservertest

import (
	"github.com/sharedcontent/sharedcontent/internal/testutil/testca"
	"github.com/sharedcontent/sharedcontent/lockserver"
	"github.com/sharedcontent/sharedcontent/lockserver/httpserver"
)

// Option configures a Server started by Start.
type Option func(*options)

type options struct {
	addr       string
	dataDir    string
	config     lockserver.Config
	token      string
	adminToken string
	nodeTokens map[string]string
	ca         *testca.CA
	mtls       bool
	identity   bool
	mutate     []func(*httpserver.Config)
}

// DefaultAddr is where a Server listens unless WithAddr says
// otherwise: a free loopback port, chosen at the first start and kept
// across restarts.
const DefaultAddr = "127.0.0.1:0"

func newOptions(opts []Option) options {
	o := options{addr: DefaultAddr, config: lockserver.DefaultConfig()}
	for _, opt := range opts {
		opt(&o)
	}
	return o
}

// WithConfig replaces the coordinator's Config (lockserver.DefaultConfig
// otherwise).
func WithConfig(cfg lockserver.Config) Option { return func(o *options) { o.config = cfg } }

// WithServerConfig changes the server's httpserver.Config after every other option has
// set it, before the first start.
func WithServerConfig(mutate func(*httpserver.Config)) Option {
	return func(o *options) { o.mutate = append(o.mutate, mutate) }
}

// WithAddr listens on addr (for example one a client already tries to
// reach) instead of a free port.
func WithAddr(addr string) Option { return func(o *options) { o.addr = addr } }

// WithDataDir keeps the coordinator's database in dir instead of a new
// temp directory: one a test prepared, or one a stopped coordinator left
// (two running on one database would wait on its file lock).
func WithDataDir(dir string) Option { return func(o *options) { o.dataDir = dir } }

// WithToken makes clients send token as their bearer token (written to a
// private token file, AuthTokenFile).
func WithToken(token string) Option { return func(o *options) { o.token = token } }

// WithAdminToken makes admin calls (forget, adopt) need token
// (AdminTokenFile).
func WithAdminToken(token string) Option { return func(o *options) { o.adminToken = token } }

// WithNodeTokens gives each node its own bearer token (NodeTokensFile,
// node ID → token): a node may then act only as itself.
func WithNodeTokens(tokens map[string]string) Option {
	return func(o *options) { o.nodeTokens = tokens }
}

// WithTLS serves HTTPS with a certificate for 127.0.0.1 issued by ca.
// Clients trust it through Server.ClientTLS.
func WithTLS(ca *testca.CA) Option { return func(o *options) { o.ca = ca } }

// WithMTLS serves HTTPS as WithTLS does and requires client certificates
// issued by ca (TLSClientCA).
func WithMTLS(ca *testca.CA) Option {
	return func(o *options) {
		o.ca = ca
		o.mtls = true
	}
}

// WithNodeIdentity serves mTLS as WithMTLS does, and a client
// certificate names its node (TLSNodeIdentity: URI SAN
// urn:sharedcontent:node:ID, else the common name; the URI SAN
// urn:sharedcontent:admin is the admin). See Server.ClientTLS.
func WithNodeIdentity(ca *testca.CA) Option {
	return func(o *options) {
		o.ca = ca
		o.mtls = true
		o.identity = true
	}
}
