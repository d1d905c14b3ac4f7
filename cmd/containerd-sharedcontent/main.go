// Command containerd-sharedcontent is the sharedcontent proxy-plugin
// daemon, one per node. It serves containerd's content API, and its Diff API
// for unpacking (as root: applying a layer mounts the snapshot), on a unix
// socket over a content directory that several nodes share, coordinating every
// download and delete through a coordinator. With no --coordinator it
// embeds one (the default), used in-process and, with --coordinator-listen,
// served to the other nodes. The old flag names --lock-server,
// --lock-server-ca and --lock-listen still work, deprecated.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/containerd/log"
	"github.com/coreos/go-systemd/v22/daemon"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/sharedcontent/sharedcontent/cmd/internal/cli"
	"github.com/sharedcontent/sharedcontent/contentv2"
	"github.com/sharedcontent/sharedcontent/contentv2/remote"
	"github.com/sharedcontent/sharedcontent/internal/reannounce"
	"github.com/sharedcontent/sharedcontent/internal/tokenfile"
	"github.com/sharedcontent/sharedcontent/internal/version"
	"github.com/sharedcontent/sharedcontent/lockclient"
	"github.com/sharedcontent/sharedcontent/lockserver"
	"github.com/sharedcontent/sharedcontent/lockserver/api"
	"github.com/sharedcontent/sharedcontent/lockserver/httpserver"
	"github.com/sharedcontent/sharedcontent/plugin"
)

const (
	defaultAddress = "/run/sharedcontent/sharedcontent.sock"
	defaultDataDir = "/var/lib/sharedcontent"
	// defaultStateDir holds the node journal; it must be on the node's
	// own disk.
	defaultStateDir = "/var/lib/sharedcontent/node"
	// defaultReapInterval is docs/design.md §8.12's. The reaper's grace is the
	// coordinator flag --reap-grace (lockserver.DefaultReapGrace): this
	// node's reaper and its embedded coordinator use the same.
	defaultReapInterval = time.Hour
	// shutdownGrace bounds how long content calls in flight may finish
	// after the drain (or after a server error, which drains nothing).
	shutdownGrace = 10 * time.Second
	// defaultDrainTimeout bounds the drain on SIGTERM (--drain-timeout).
	defaultDrainTimeout = 30 * time.Second
)

func main() {
	run := run
	if len(os.Args) > 1 && os.Args[1] == "install" {
		run = func(args []string) error { return runInstall(args[1:]) }
	}
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "containerd-sharedcontent:", err)
		os.Exit(1)
	}
}

type options struct {
	root, address, nodeID, stateDir      string
	reapInterval                         time.Duration
	storageTimeout                       time.Duration
	drainTimeout                         time.Duration
	adopt                                bool
	coordinatorURL, coordinatorListen    string
	coordinatorCA, clientCert, clientKey string
	nodeTokenFile                        string
	metricsListen, logLevel              string
	containerdAddress, containerdNS      string
	embedded                             httpserver.Config
}

func parse(args []string) (options, error) {
	var o options
	fs := newFlagSet(&o)
	if err := cli.Parse(fs, args); err != nil {
		return o, err
	}
	return o, o.check()
}

// newFlagSet defines the daemon's flags over o, set to their defaults.
func newFlagSet(o *options) *flag.FlagSet {
	hostname, _ := os.Hostname()
	*o = options{embedded: httpserver.Config{Config: lockserver.DefaultConfig(), DataDir: defaultDataDir}}
	fs := flag.NewFlagSet("containerd-sharedcontent", flag.ContinueOnError)
	fs.Usage = cli.Usage(fs, "usage: containerd-sharedcontent --root DIR [flags]")
	fs.String(cli.ConfigFlag, "", "TOML config file; its keys are the flag names")
	fs.StringVar(&o.root, "root", "", "shared content directory (the same path on every node; required)")
	fs.StringVar(&o.address, "address", defaultAddress, "unix socket containerd's proxy_plugins entry points at")
	fs.StringVar(&o.nodeID, "node-id", hostname, "this node's name, unique in the cluster")
	fs.StringVar(&o.stateDir, "state-dir", defaultStateDir, "this node's local state (the journal of the blobs it uses); on local disk, not the shared storage")
	fs.DurationVar(&o.reapInterval, "reap-interval", defaultReapInterval, "how often this node offers to run the reaper (one node at a time runs it; 0: never)")
	fs.DurationVar(&o.storageTimeout, "storage-timeout", contentv2.DefaultStorageTimeout, "how long one call on the shared root (a look-up, one chunk read or written, a rename, a commit) may take before it fails as unavailable and the node counts its root as stalled: no deletes, no reaper pass, until it answers")
	fs.BoolVar(&o.adopt, "adopt", false, "with the embedded coordinator: adopt the shared root's cluster at start (after its database was lost)")
	fs.StringVar(&o.coordinatorURL, "coordinator", "", "coordinator URL (http:// or https://), or the comma-separated URLs of its replicas (the node follows the leader); empty embeds one")
	fs.StringVar(&o.coordinatorListen, "coordinator-listen", "", "with the embedded coordinator: also serve it to other nodes on this address")
	fs.StringVar(&o.coordinatorCA, "coordinator-ca", "", "CA (PEM) to verify an https coordinator")
	cli.Alias(fs, "lock-server", "coordinator")
	cli.Alias(fs, "lock-listen", "coordinator-listen")
	cli.Alias(fs, "lock-server-ca", "coordinator-ca")
	fs.StringVar(&o.clientCert, "node-cert", "", "this node's client certificate (PEM) for a coordinator that requires mTLS; with --tls-node-identity there, it names the node (URI SAN urn:sharedcontent:node:ID or CN)")
	fs.StringVar(&o.clientKey, "node-key", "", "the private key (PEM) of --node-cert")
	fs.StringVar(&o.clientCert, "lock-client-cert", "", "old name of --node-cert")
	fs.StringVar(&o.clientKey, "lock-client-key", "", "old name of --node-key")
	fs.StringVar(&o.nodeTokenFile, "node-token-file", "", "this node's own bearer token for a remote coordinator with --node-tokens-file (default: --auth-token-file)")
	fs.StringVar(&o.metricsListen, "metrics-listen", "", "serve Prometheus /metrics on this address (empty: off)")
	fs.StringVar(&o.logLevel, "log-level", "info", "log level: trace, debug, info, warn, error")
	fs.DurationVar(&o.drainTimeout, "drain-timeout", defaultDrainTimeout, "on SIGTERM or SIGINT, how long to keep serving the pulls in flight before stopping: the daemon stops once no call has been in flight for 3 s (at once if containerd is not connected), or when this passes (0: stop at once)")
	cli.DefineVersion(fs)
	fs.StringVar(&o.containerdAddress, "containerd-address", reannounce.DefaultAddress, "containerd's API socket: once serving, and each time containerd restarts, announce every image to it so that CRI reloads those it could not read while this daemon was down (empty: off)")
	fs.StringVar(&o.containerdNS, "containerd-namespace", reannounce.DefaultNamespace, "the containerd namespace whose images --containerd-address announces (CRI's is k8s.io; empty: every namespace)")
	httpserver.RegisterFlags(fs, &o.embedded)
	for _, r := range httpserver.RenamedFlags {
		cli.Alias(fs, r.Old, r.New)
	}
	return fs
}

// check refuses settings that cannot work together.
func (o options) check() error {
	switch {
	case o.root == "":
		return errors.New("--root is required")
	case o.nodeID == "":
		return errors.New("--node-id is required (the hostname is unknown)")
	case o.coordinatorURL != "" && o.coordinatorListen != "":
		return errors.New("--coordinator-listen serves the embedded coordinator; it cannot be used with --coordinator")
	case o.coordinatorURL != "" && o.adopt:
		return errors.New("--adopt adopts with the embedded coordinator; for a remote one use sharedcontentctl cluster adopt")
	case o.stateDir == "":
		return errors.New("--state-dir is required")
	case o.storageTimeout <= 0:
		return fmt.Errorf("--storage-timeout %v: must be positive", o.storageTimeout)
	case o.drainTimeout < 0:
		return fmt.Errorf("--drain-timeout %v: must not be negative", o.drainTimeout)
	}
	if o.coordinatorURL != "" {
		if _, err := lockclient.ParseURLs(o.coordinatorURL); err != nil {
			return fmt.Errorf("--coordinator: %w", err)
		}
	} else if err := o.embedded.CheckLeaseTTL(); err != nil {
		return err
	}
	return nil
}

// begin parses args with parse, sets the log level it names, and returns
// a context that SIGINT or SIGTERM ends; a nil context: --help was asked.
func begin[O any](args []string, parse func([]string) (O, error), logLevel func(O) string) (O, context.Context, context.CancelFunc, error) {
	o, err := parse(args)
	if errors.Is(err, flag.ErrHelp) {
		return o, nil, func() {}, nil
	}
	if err != nil {
		return o, nil, func() {}, err
	}
	if err := cli.SetLogLevel(logLevel(o)); err != nil {
		return o, nil, func() {}, err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	return o, ctx, stop, nil
}

func run(args []string) error {
	o, ctx, stop, err := begin(args, parse, func(o options) string { return o.logLevel })
	defer stop()
	if ctx == nil {
		return err
	}
	ctx = log.WithLogger(ctx, log.G(ctx).WithField("node", o.nodeID))

	errCh := make(chan error, 3)
	var cleanups []func(context.Context) error
	shutdown := func() error {
		sctx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
		defer cancel()
		var errs []error
		for i := len(cleanups) - 1; i >= 0; i-- {
			errs = append(errs, cleanups[i](sctx))
		}
		return errors.Join(errs...)
	}

	// Refuse a bad root, or one this node did not join, before opening
	// anything (NewStore checks again).
	if err := contentv2.VerifyRoot(o.root, o.stateDir); err != nil {
		return err
	}
	// A mount that hides other nodes' new blobs is warned about, not
	// refused (docs/design.md §6).
	if w, err := contentv2.RootMountWarning(o.root); err != nil {
		log.G(ctx).WithError(err).WithField("root", o.root).Warn("cannot read the shared root's mount options")
	} else if w != "" {
		log.G(ctx).WithField("root", o.root).Warn(w)
	}
	coord, err := coordinator(ctx, o, errCh, &cleanups)
	if err != nil {
		return errors.Join(err, shutdown())
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(version.Collector())
	store, err := contentv2.NewStore(o.root, o.nodeID, remote.New(coord), contentv2.WithRegisterer(reg),
		contentv2.WithStateDir(o.stateDir), contentv2.WithReaper(o.reapInterval, o.embedded.ReapGrace),
		contentv2.WithStorageTimeout(o.storageTimeout))
	if err != nil {
		return errors.Join(err, shutdown())
	}
	cleanups = append(cleanups, func(context.Context) error { return store.Close() })

	srv, err := plugin.Listen(o.address, store)
	if err != nil {
		return errors.Join(err, shutdown())
	}
	cleanups = append(cleanups, func(ctx context.Context) error { srv.Stop(ctx); return nil })

	if o.metricsListen != "" {
		ln, err := net.Listen("tcp", o.metricsListen)
		if err != nil {
			return errors.Join(err, shutdown())
		}
		mux := http.NewServeMux()
		mux.Handle("/", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
		mux.HandleFunc("/readyz", readyz(ctx, store))
		mux.HandleFunc("/healthz", healthz)
		ms := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
		go func() {
			if err := ms.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
				errCh <- err
			}
		}()
		cleanups = append(cleanups, ms.Shutdown)
	}

	go func() { errCh <- srv.Serve(ctx) }()
	if o.containerdAddress != "" {
		// Once serving: CRI may have dropped every image while this daemon
		// was down (docs/design.md §6.1).
		rctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() {
			defer close(done)
			if err := reannounce.Run(rctx, reannounce.Config{Address: o.containerdAddress, Namespace: o.containerdNS}); err != nil {
				log.G(ctx).WithError(err).Error("--containerd-address: images are not announced to containerd")
			}
		}()
		cleanups = append(cleanups, func(context.Context) error { cancel(); <-done; return nil })
	}

	if os.Geteuid() != 0 {
		log.G(ctx).Warn("not running as root: the diff API cannot mount snapshots, so containerd must not use sharedcontent-diff on this node (it still works without it, only slower)")
	}
	log.G(ctx).WithField("root", o.root).WithField("address", o.address).WithField("version", version.Get().Version).
		WithField("coordinator", or(o.coordinatorURL, "embedded")).Info("containerd-sharedcontent ready")
	// READY=1 once the socket is listening, so that a unit ordered
	// Before=containerd.service starts containerd only when its content and
	// diff proxies can connect.
	cli.Notify(ctx, daemon.SdNotifyReady+"\nSTATUS=serving on "+o.address)
	select {
	case err = <-errCh:
		log.G(ctx).WithError(err).Error("stopping after a server error")
	case <-ctx.Done():
	}
	cli.Notify(ctx, daemon.SdNotifyStopping)
	if err == nil {
		drain(ctx, srv, o.drainTimeout)
		log.G(ctx).Info("shutting down")
	}
	return errors.Join(err, shutdown())
}

// coordinator connects to the coordinator, or embeds one.
func coordinator(ctx context.Context, o options, errCh chan<- error, cleanups *[]func(context.Context) error) (*lockclient.Client, error) {
	opts := []lockclient.Option{lockclient.WithNodeID(o.nodeID)}
	tokenFile := o.embedded.AuthTokenFile
	if o.nodeTokenFile != "" {
		tokenFile = o.nodeTokenFile
	}
	if tokenFile != "" {
		token, err := tokenfile.Read(tokenFile)
		if err != nil {
			return nil, fmt.Errorf("auth token: %w", err)
		}
		opts = append(opts, lockclient.WithBearerToken(token))
	}
	if o.coordinatorURL != "" {
		tc, err := lockclient.TLSConfigFromFiles(o.coordinatorCA, o.clientCert, o.clientKey)
		if err != nil {
			return nil, err
		}
		if tc != nil {
			opts = append(opts, lockclient.WithTLSConfig(tc))
		}
		return lockclient.New(o.coordinatorURL, opts...)
	}

	srv, err := httpserver.Open(o.embedded)
	if err != nil {
		return nil, err
	}
	*cleanups = append(*cleanups, srv.Shutdown)
	if o.adopt {
		if err := adopt(ctx, srv.Coordinator, o.root); err != nil {
			return nil, err
		}
	}
	if o.coordinatorListen != "" {
		ln, err := net.Listen("tcp", o.coordinatorListen)
		if err != nil {
			return nil, err
		}
		go func() { errCh <- srv.Serve(ln) }()
		log.G(ctx).WithField("listen", ln.Addr().String()).WithField("auth", o.embedded.Identity()).
			Info("embedded coordinator serving other nodes")
	}
	return lockclient.NewEmbedded(srv.Coordinator, opts...)
}

// adopt makes the embedded coordinator take the root's cluster and members.
func adopt(ctx context.Context, l *lockserver.Coordinator, root string) error {
	id, err := contentv2.ReadClusterID(root)
	if err != nil {
		return err
	}
	if id == "" {
		return fmt.Errorf("--adopt: %s records no cluster; nothing to adopt", root)
	}
	nodes, err := contentv2.NodeMarkers(root)
	if err != nil {
		return err
	}
	c, err := l.Adopt(ctx, api.AdoptRequest{ClusterID: id, Nodes: nodes})
	if err != nil {
		return fmt.Errorf("--adopt: %w", err)
	}
	log.G(ctx).WithField("cluster_id", c.ClusterID).WithField("epoch", c.Epoch).WithField("members", nodes).
		Warn("adopted the shared root's cluster; deletes wait until every member has synced")
	return nil
}

// drain lets the pulls in flight finish (plugin.Server.Drain), for at
// most timeout: an upgrade's restart then cuts none of them.
func drain(ctx context.Context, srv *plugin.Server, timeout time.Duration) {
	if timeout == 0 {
		return
	}
	l := log.G(ctx).WithField("drain_timeout", timeout)
	l.Info("draining: serving the pulls in flight until no call has come for " + plugin.DrainQuiet.String())
	start := time.Now()
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
	defer cancel()
	if err := srv.Drain(dctx, plugin.DrainQuiet); err != nil {
		l.Warn("--drain-timeout passed with calls still in flight: stopping them")
		return
	}
	l.WithField("took", time.Since(start).Round(time.Millisecond)).Info("drained")
}

// healthz answers "ok" while the process runs, with its build in
// version.Header.
func healthz(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set(version.Header, version.Get().String())
	fmt.Fprintln(w, "ok")
}

// readyz answers 200 while the store serves, and 503 with the reason
// while it refuses writes and deletes (its shared root is not verified)
// or once the daemon is stopping (ctx ended: it drains, then stops).
func readyz(ctx context.Context, store contentv2.Store) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if ctx.Err() != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintln(w, "not ready: draining before it stops")
			return
		}
		if err := store.Ready(); err != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintln(w, "not ready:", err)
			return
		}
		fmt.Fprintln(w, "ok")
	}
}

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
