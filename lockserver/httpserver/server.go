package httpserver

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/containerd/log"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/valyala/fasthttp"

	"github.com/sharedcontent/sharedcontent/internal/tokenfile"
	"github.com/sharedcontent/sharedcontent/internal/version"
	"github.com/sharedcontent/sharedcontent/lockserver"
	"github.com/sharedcontent/sharedcontent/lockserver/api"
	"github.com/sharedcontent/sharedcontent/refcount"
)

// DBFile is the bbolt file under the data directory that holds reference
// sets and the fence high-water mark.
const DBFile = "sharedcontent-lockserver.db"

// Config is everything a stand-alone or embedded coordinator needs.
type Config struct {
	lockserver.Config
	// DataDir holds DBFile. Required.
	DataDir string
	// AuthTokenFile, when set, holds the bearer token clients must send.
	AuthTokenFile string
	// AdminTokenFile, when set, holds the bearer token of admin calls
	// (forget, adopt); otherwise they need AuthTokenFile's, if any.
	AdminTokenFile string
	// TLSCert and TLSKey, when set, make Serve speak HTTPS.
	TLSCert string
	TLSKey  string
	// TLSClientCA, when set, requires client certificates signed by it (mTLS).
	TLSClientCA string
	// TLSNodeIdentity names each client by its certificate (auth.go):
	// a node may act only as itself. Needs TLSClientCA.
	TLSNodeIdentity bool
	// NodeTokensFile, when set, holds one "NODE_ID TOKEN" line per node:
	// each token authenticates its node, which may act only as itself.
	NodeTokensFile string
	// Limits bound the connections served; the zero value picks defaults
	// below the descriptor limit.
	Limits ConnLimits
	// Leadership, when set, makes the server a replica that serves the
	// API only while it leads (leadership.go, docs/design.md §7); nil:
	// it always leads.
	Leadership Leadership
}

// Server serves a coordinator over HTTP: it owns the lock manager (a
// lockserver.Coordinator, nil on a standby), its database in the data
// directory, the Handler and the listeners.
type Server struct {
	// Coordinator is the in-process API, for an embedded coordinator.
	Coordinator *lockserver.Coordinator

	storage *refcount.BoltStorage
	handler *Handler
	http    *fasthttp.Server
	tls     *tls.Config // nil serves plain HTTP
	limits  ConnLimits
	metrics *serverMetrics
	cfg     Config
	// exposedWarnEvery is how often Serve repeats that anyone may call
	// (identity.go).
	exposedWarnEvery time.Duration

	mu       sync.Mutex
	served   []*guardedListener // protected by mu: listeners given to Serve
	shutdown bool               // protected by mu
}

// Open opens the data directory and starts the Coordinator. Call Shutdown
// to stop it and flush the database.
func Open(cfg Config) (*Server, error) {
	if cfg.DataDir == "" {
		return nil, errors.New("lockserver: data_dir is required")
	}
	if err := checkDataDir(cfg.DataDir); err != nil {
		return nil, err
	}
	opts, err := cfg.authOptions()
	if err != nil {
		return nil, err
	}
	storage, err := refcount.OpenBoltStorage(filepath.Join(cfg.DataDir, DBFile))
	if err != nil {
		return nil, dataDirError(cfg.DataDir, err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), version.Collector())
	coord, err := lockserver.NewCoordinator(cfg.CoordinatorConfig(), lockserver.Options{
		Refs:       refcount.NewManager(storage),
		Registerer: reg,
	})
	if err != nil {
		storage.Close()
		return nil, err
	}
	s, err := newServer(cfg, coord, reg, append(opts, WithReadinessCheck(freeSpaceCheck(cfg.DataDir)))...)
	if err != nil {
		coord.Close()
		storage.Close()
		return nil, err
	}
	s.storage = storage
	if c := cfg.CoordinatorConfig(); c.ReapersRequired && len(c.Reapers) == 0 {
		log.L.Warn("no --reapers: with node identities no node runs the reaper, so nothing is reclaimed; name the reaper nodes with --reapers")
	}
	return s, nil
}

// NewStandby returns a Server with no Coordinator and no data directory: a
// replica whose election (cfg.Leadership, required) decides when it leads
// and hands the Handler the Coordinator of each term it wins
// (Handler.SetCoordinator; docs/design.md §7). /metrics serves the
// server's own metrics and metrics'. Its owner closes the Coordinators.
func NewStandby(cfg Config, metrics prometheus.Gatherer) (*Server, error) {
	if cfg.Leadership == nil {
		return nil, errors.New("lockserver: a standby needs a Leadership")
	}
	opts, err := cfg.authOptions()
	if err != nil {
		return nil, err
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	var g prometheus.Gatherer = reg
	if metrics != nil {
		g = prometheus.Gatherers{reg, metrics}
	}
	return newServer(cfg, nil, reg, append(opts, WithMetricsGatherer(g))...)
}

// newServer builds the Server of coord (nil: a standby's) with the
// Handler options opts, registering its metrics with reg.
func newServer(cfg Config, coord *lockserver.Coordinator, reg *prometheus.Registry, opts ...HandlerOption) (*Server, error) {
	limits := cfg.Limits.withDefaults()
	opts = append([]HandlerOption{WithMetricsGatherer(reg)}, opts...)
	opts = append(opts, WithStreamLimits(max(1, limits.Total/2), max(1, limits.PerIP/2), DefaultMaxStreamsPerNode))
	if cfg.Leadership != nil {
		opts = append(opts, WithLeadership(cfg.Leadership))
	}
	sm := newServerMetrics()
	reg.MustRegister(sm)
	s := &Server{Coordinator: coord, handler: NewHandler(coord, opts...), limits: limits, metrics: sm,
		cfg: cfg, exposedWarnEvery: exposedWarnEvery}
	reg.MustRegister(s.handler.StreamMetrics())
	s.http = s.handler.HTTPServer()
	s.http.IdleTimeout = limits.Idle
	if cfg.TLSCert != "" || cfg.TLSKey != "" {
		var err error
		if s.tls, err = serverTLS(cfg); err != nil {
			return nil, err
		}
	}
	if msg := cfg.noAdminWarning(); msg != "" {
		log.L.Warn(msg)
	}
	return s, nil
}

// authOptions returns the Handler options of the configured identities.
func (cfg Config) authOptions() ([]HandlerOption, error) {
	if err := cfg.checkAuthModes(); err != nil {
		return nil, err
	}
	var opts []HandlerOption
	for _, tf := range []struct {
		path string
		opt  func(string) HandlerOption
	}{{cfg.AuthTokenFile, WithBearerToken}, {cfg.AdminTokenFile, WithAdminToken}} {
		if tf.path == "" {
			continue
		}
		token, err := tokenfile.Read(tf.path)
		if err != nil {
			return nil, fmt.Errorf("lockserver: %w", err)
		}
		opts = append(opts, tf.opt(token))
	}
	if cfg.NodeTokensFile != "" {
		tokens, err := tokenfile.ReadNodes(cfg.NodeTokensFile)
		if err != nil {
			return nil, fmt.Errorf("lockserver: %w", err)
		}
		opts = append(opts, WithNodeTokens(tokens))
	}
	if cfg.TLSNodeIdentity {
		if cfg.TLSClientCA == "" {
			return nil, errors.New("lockserver: --tls-node-identity needs --tls-client-ca (client certificates)")
		}
		opts = append(opts, WithCertIdentity())
	}
	return opts, nil
}

// CoordinatorConfig is the Coordinator's configuration: cfg's, where an
// empty --reapers designates nobody once nodes have identities of their
// own (a node token or certificate must not make its holder the reaper);
// without them every caller may act as any node, and any node may reap
// unless --reapers names some (docs/design.md §8.12).
func (cfg Config) CoordinatorConfig() lockserver.Config {
	c := cfg.Config
	c.ReapersRequired = cfg.NodeTokensFile != "" || cfg.TLSNodeIdentity
	return c
}

// checkAuthModes refuses a shared token with node identities: whoever has
// the shared token could act as any node (auth.go).
func (cfg Config) checkAuthModes() error {
	var ids []string
	if cfg.NodeTokensFile != "" {
		ids = append(ids, "--node-tokens-file")
	}
	if cfg.TLSNodeIdentity {
		ids = append(ids, "--tls-node-identity")
	}
	if cfg.AuthTokenFile == "" || len(ids) == 0 {
		return nil
	}
	return fmt.Errorf("lockserver: --auth-token-file cannot be used with %s: whoever has the shared token could act as any node. "+
		"Give every client its own identity instead (a line in --node-tokens-file, each node sending its own with --node-token-file, "+
		"or a client certificate), and put the operators' token in --admin-token-file", strings.Join(ids, " or "))
}

func serverTLS(cfg Config) (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(cfg.TLSCert, cfg.TLSKey)
	if err != nil {
		return nil, fmt.Errorf("lockserver: loading TLS key pair: %w", err)
	}
	tc := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	if cfg.TLSClientCA != "" {
		pem, err := os.ReadFile(cfg.TLSClientCA)
		if err != nil {
			return nil, fmt.Errorf("lockserver: reading client CA: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("lockserver: no certificate in client CA %s", cfg.TLSClientCA)
		}
		tc.ClientCAs = pool
		tc.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return tc, nil
}

// Handler returns the HTTP API.
func (s *Server) Handler() *Handler { return s.handler }

// Serve serves the API on ln (with TLS when configured) until Shutdown. It
// returns nil after a Shutdown.
func (s *Server) Serve(ln net.Listener) error {
	// fasthttp's Shutdown closes only the listeners Serve has already
	// registered: one that reaches Serve later would be served forever.
	if s.tls != nil {
		ln = tls.NewListener(ln, s.tls)
	}
	gl := newGuardedListener(ln, s.limits, s.answerHeader, s.metrics.rejected, s.metrics.evicted, s.metrics.acceptErrors.Inc)
	s.mu.Lock()
	if s.shutdown {
		s.mu.Unlock()
		return ln.Close()
	}
	s.served = append(s.served, gl)
	s.mu.Unlock()
	stop := make(chan struct{})
	defer close(stop)
	s.warnExposed(ln.Addr(), stop)
	err := s.http.Serve(gl)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.shutdown {
		return nil
	}
	return err
}

// answerHeader is the header every answer carries (Handle sets the same),
// as lines for an answer written without the Handler.
func (s *Server) answerHeader() string {
	h := api.ProtocolHeader + ": " + api.ProtocolVersion + "\r\n"
	if l := s.handler.coord(); l != nil {
		h = api.ClusterHeader + ": " + clusterHeader(l.Cluster()) + "\r\n" + h
	}
	return h
}

// Shutdown stops accepting, ends the event streams, waits for requests in
// flight (until ctx ends), stops the Coordinator and closes the database.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.shutdown = true
	served := s.served
	s.mu.Unlock()
	s.handler.Drain()
	// No new connections; those that have not sent a request (fasthttp
	// would wait 5 s for them) and those idle between requests go now.
	for _, ln := range served {
		ln.Close()
		ln.closeNew()
	}
	err := s.http.ShutdownWithContext(ctx)
	if errors.Is(err, net.ErrClosed) {
		err = nil // fasthttp closing the listeners closed above
	}
	if s.storage == nil {
		return err // a standby: its owner closes the Coordinators
	}
	s.Coordinator.Close()
	return errors.Join(err, s.storage.Close())
}
