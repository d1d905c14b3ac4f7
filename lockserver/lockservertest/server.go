package lockservertest

import (
	"context"
	"fmt"
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sharedcontent/sharedcontent/internal/testutil/logbuf"
	"github.com/sharedcontent/sharedcontent/internal/testutil/testca"
	"github.com/sharedcontent/sharedcontent/lockserver"
	"github.com/sharedcontent/sharedcontent/lockserver/httpserver"
)

// StopTimeout bounds a Stop: requests still in flight after it fail the
// test, since a coordinator under test has no reason to hang.
const StopTimeout = 20 * time.Second

// relistenTimeout bounds how long a restart waits for its address to be
// free again (the old listener's port may linger briefly).
const relistenTimeout = 10 * time.Second

// Server is a real coordinator (bbolt data directory, HTTP API on a
// loopback port) that a test stops, restarts and wipes. Its address and
// data directory stay the same across restarts. It is stopped when the
// test ends. Its methods may be called from any goroutine.
type Server struct {
	t       testing.TB
	cfg     httpserver.Config
	addr    string // host:port, fixed at the first start
	scheme  string // "http" or "https"
	ca      *testca.CA
	counter atomic.Int64 // connections accepted, over every start

	mu   sync.Mutex
	srv  *httpserver.Server // protected by mu; nil while stopped
	done chan error         // protected by mu: the running Serve's result
}

// Start starts a coordinator on a free loopback port (or WithAddr's) with
// a temp data directory (or WithDataDir's) and lockserver.DefaultConfig
// (or WithConfig's). What the logger writes while the test runs is shown
// only if it fails (logbuf.ShowOnFailure).
func Start(t testing.TB, opts ...Option) *Server {
	t.Helper()
	logbuf.ShowOnFailure(t)
	o := newOptions(opts)
	c := &Server{t: t, scheme: "http", ca: o.ca}
	c.cfg = c.serverConfig(o)
	ln, err := net.Listen("tcp", o.addr)
	require.NoError(t, err)
	c.addr = ln.Addr().String()
	c.serve(ln)
	t.Cleanup(c.Stop)
	return c
}

// serverConfig turns the options into the server's configuration,
// writing the token and certificate files it names.
func (c *Server) serverConfig(o options) httpserver.Config {
	cfg := httpserver.Config{Config: o.config, DataDir: o.dataDir}
	if cfg.DataDir == "" {
		cfg.DataDir = c.t.TempDir()
	}
	files := c.t.TempDir()
	if o.token != "" {
		cfg.AuthTokenFile = writeToken(c.t, files, "token", o.token)
	}
	if o.adminToken != "" {
		cfg.AdminTokenFile = writeToken(c.t, files, "admin-token", o.adminToken)
	}
	if o.nodeTokens != nil {
		cfg.NodeTokensFile = writeNodeTokens(c.t, files, o.nodeTokens)
	}
	if o.ca != nil {
		c.scheme = "https"
		cfg.TLSCert, cfg.TLSKey = serverCert(c.t, o.ca, files)
		if o.mtls {
			cfg.TLSClientCA = testca.WriteFile(c.t, files, "client-ca.crt", o.ca.PEM)
			cfg.TLSNodeIdentity = o.identity
		}
	}
	for _, m := range o.mutate {
		m(&cfg)
	}
	return cfg
}

// writeToken writes a bearer token file, with a trailing newline as
// editors leave it, readable by its owner only.
func writeToken(t testing.TB, dir, name, token string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	require.NoError(t, os.WriteFile(p, []byte(token+"\n"), 0o600))
	return p
}

// writeNodeTokens writes a node tokens file: one "NODE_ID TOKEN" line per
// node, sorted, readable by its owner only.
func writeNodeTokens(t testing.TB, dir string, tokens map[string]string) string {
	t.Helper()
	var b strings.Builder
	for _, node := range slices.Sorted(maps.Keys(tokens)) {
		fmt.Fprintf(&b, "%s %s\n", node, tokens[node])
	}
	p := filepath.Join(dir, "node-tokens")
	require.NoError(t, os.WriteFile(p, []byte(b.String()), 0o600))
	return p
}

// serve opens the server on the data directory and serves it on ln.
func (c *Server) serve(ln net.Listener) {
	c.t.Helper()
	srv, err := httpserver.Open(c.cfg)
	if err != nil {
		ln.Close()
	}
	require.NoError(c.t, err)
	done := make(chan error, 1)
	go func() { done <- srv.Serve(&countingListener{Listener: ln, n: &c.counter}) }()
	c.mu.Lock()
	c.srv, c.done = srv, done
	c.mu.Unlock()
}

// Start starts a stopped coordinator again on its address, with its data
// directory as it is: a new epoch, the same references and members.
func (c *Server) Start() {
	c.t.Helper()
	var ln net.Listener
	require.Eventually(c.t, func() bool {
		var err error
		ln, err = net.Listen("tcp", c.addr)
		return err == nil
	}, relistenTimeout, 10*time.Millisecond, "listening again on %s", c.addr)
	c.serve(ln)
}

// Stop shuts the coordinator down, ending its event streams, and waits
// for Serve to return. A shutdown error fails the test. Stopping a
// stopped coordinator does nothing.
func (c *Server) Stop() {
	c.t.Helper()
	c.mu.Lock()
	srv, done := c.srv, c.done
	c.srv, c.done = nil, nil
	c.mu.Unlock()
	if srv == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), StopTimeout)
	defer cancel()
	require.NoError(c.t, srv.Shutdown(ctx), "coordinator shutdown")
	require.NoError(c.t, <-done, "coordinator Serve")
}

// Restart stops and starts it: locks and sessions are lost, references and
// members kept.
func (c *Server) Restart() {
	c.t.Helper()
	c.Stop()
	c.Start()
}

// Wipe stops it, removes its data directory (a new machine, a lost disk)
// and starts it: a new cluster that knows no node and no reference.
func (c *Server) Wipe() {
	c.t.Helper()
	c.Stop()
	require.NoError(c.t, os.RemoveAll(c.cfg.DataDir))
	c.Start()
}

// Running reports whether it is started.
func (c *Server) Running() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.srv != nil
}

// HTTPServer is the running HTTP server; it fails the test while stopped.
func (c *Server) HTTPServer() *httpserver.Server {
	c.t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	require.NotNil(c.t, c.srv, "the coordinator is stopped")
	return c.srv
}

// Core is the running server's lock manager, the lockserver.Coordinator
// behind its HTTP side, for asserting on the coordinator's state in
// process; it fails the test while stopped.
func (c *Server) Core() *lockserver.Coordinator {
	c.t.Helper()
	return c.HTTPServer().Coordinator
}

// URL is the API's base URL, "http://127.0.0.1:port" (https with WithTLS).
func (c *Server) URL() string { return c.scheme + "://" + c.addr }

// Addr is the host:port it listens on.
func (c *Server) Addr() string { return c.addr }

// DataDir is the directory holding its database.
func (c *Server) DataDir() string { return c.cfg.DataDir }

// Config is the configuration it was started with (token and certificate
// file paths included).
func (c *Server) Config() httpserver.Config { return c.cfg }

// Accepted is how many TCP connections it has accepted, over every start.
func (c *Server) Accepted() int64 { return c.counter.Load() }

// countingListener counts the connections it accepts into n.
type countingListener struct {
	net.Listener
	n *atomic.Int64
}

func (l *countingListener) Accept() (net.Conn, error) {
	conn, err := l.Listener.Accept()
	if err == nil {
		l.n.Add(1)
	}
	return conn, err
}
