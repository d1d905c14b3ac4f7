package lockserver

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/sharedcontent/sharedcontent/refcount"
)

// DBFile is the bbolt file under the data directory that holds referrer
// sets and the fence high-water mark.
const DBFile = "sharedcontent-lockserver.db"

// ServerConfig is everything a stand-alone or embedded lock server needs.
type ServerConfig struct {
	Config
	// DataDir holds DBFile. Required.
	DataDir string
	// AuthTokenFile, when set, holds the bearer token clients must send.
	AuthTokenFile string
	// TLSCert and TLSKey, when set, make Serve speak HTTPS.
	TLSCert string
	TLSKey  string
	// TLSClientCA, when set, requires client certificates signed by it (mTLS).
	TLSClientCA string
}

// Server is a Locker with its persistent state and HTTP API.
type Server struct {
	// Locker is the in-process API, for an embedded coordinator.
	Locker *Locker

	storage *refcount.BoltStorage
	handler *Handler
	http    *http.Server
}

// OpenServer opens the data directory and starts the Locker. Call Shutdown
// to stop it and flush the database.
func OpenServer(cfg ServerConfig) (*Server, error) {
	if cfg.DataDir == "" {
		return nil, errors.New("lockserver: data_dir is required")
	}
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("lockserver: creating data dir: %w", err)
	}
	storage, err := refcount.OpenBoltStorage(filepath.Join(cfg.DataDir, DBFile))
	if err != nil {
		return nil, fmt.Errorf("lockserver: %w", err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	locker, err := NewLocker(cfg.Config, Options{
		Refs:       refcount.NewManager(storage, refcount.Config{UpdateRequiresNoRef: cfg.UpdateRequiresNoRef}),
		Fences:     storage,
		Registerer: reg,
	})
	if err != nil {
		storage.Close()
		return nil, err
	}
	opts := []HandlerOption{WithMetricsGatherer(reg)}
	if cfg.AuthTokenFile != "" {
		b, err := os.ReadFile(cfg.AuthTokenFile)
		token := strings.TrimSpace(string(b))
		if err == nil && token == "" {
			err = errors.New("file is empty")
		}
		if err != nil {
			locker.Close()
			storage.Close()
			return nil, fmt.Errorf("lockserver: auth token file %s: %w", cfg.AuthTokenFile, err)
		}
		opts = append(opts, WithBearerToken(token))
	}
	s := &Server{Locker: locker, storage: storage, handler: NewHandler(locker, opts...)}
	s.http = &http.Server{
		Handler:           s.handler,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
	}
	s.http.RegisterOnShutdown(s.handler.Drain)
	if cfg.TLSCert != "" || cfg.TLSKey != "" {
		tc, err := serverTLS(cfg)
		if err != nil {
			locker.Close()
			storage.Close()
			return nil, err
		}
		s.http.TLSConfig = tc
	}
	return s, nil
}

func serverTLS(cfg ServerConfig) (*tls.Config, error) {
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
func (s *Server) Handler() http.Handler { return s.handler }

// Serve serves the API on ln (with TLS when configured) until Shutdown. It
// returns nil after a Shutdown.
func (s *Server) Serve(ln net.Listener) error {
	var err error
	if s.http.TLSConfig != nil {
		err = s.http.Serve(tls.NewListener(ln, s.http.TLSConfig))
	} else {
		err = s.http.Serve(ln)
	}
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// Shutdown stops accepting, ends the event streams, waits for requests in
// flight (until ctx ends), stops the Locker and closes the database.
func (s *Server) Shutdown(ctx context.Context) error {
	s.handler.Drain()
	err := s.http.Shutdown(ctx)
	s.Locker.Close()
	return errors.Join(err, s.storage.Close())
}
