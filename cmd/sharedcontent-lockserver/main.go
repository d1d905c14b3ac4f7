// Command sharedcontent-lockserver runs the sharedcontent coordinator (docs/design.md
// §3) as a stand-alone server: the lock service, lease keeper and reference
// registry that every node's containerd-sharedcontent talks to.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/containerd/log"
	"github.com/coreos/go-systemd/v22/daemon"

	"github.com/sharedcontent/sharedcontent/cmd/internal/cli"
	"github.com/sharedcontent/sharedcontent/internal/version"
	"github.com/sharedcontent/sharedcontent/lockserver"
	"github.com/sharedcontent/sharedcontent/lockserver/election"
	"github.com/sharedcontent/sharedcontent/lockserver/httpserver"
)

const (
	defaultListen  = "127.0.0.1:8642"
	defaultDataDir = "/var/lib/sharedcontent-lockserver"
	// defaultDrainTimeout bounds how long requests in flight may finish
	// on SIGTERM (--drain-timeout).
	defaultDrainTimeout = 10 * time.Second
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "sharedcontent-lockserver:", err)
		os.Exit(1)
	}
}

// options are the command line's settings.
type options struct {
	cfg              httpserver.Config
	etcd             election.Options
	listen, logLevel string
	drainTimeout     time.Duration
}

// flags returns the command's flag set, writing into o.
func flags(o *options) *flag.FlagSet {
	fs := flag.NewFlagSet("sharedcontent-lockserver", flag.ContinueOnError)
	fs.Usage = cli.Usage(fs, "usage: sharedcontent-lockserver [flags]")
	fs.String(cli.ConfigFlag, "", "TOML config file; its keys are the flag names")
	fs.StringVar(&o.listen, "listen", defaultListen, "address to serve the HTTP API on")
	fs.StringVar(&o.logLevel, "log-level", "info", "log level: trace, debug, info, warn, error")
	fs.DurationVar(&o.drainTimeout, "drain-timeout", defaultDrainTimeout, "on SIGTERM or SIGINT, how long the requests in flight may finish (new ones are answered 503, which nodes retry at another replica or after the restart) before they are cut")
	cli.DefineVersion(fs)
	httpserver.RegisterFlags(fs, &o.cfg)
	for _, r := range httpserver.RenamedFlags {
		cli.Alias(fs, r.Old, r.New)
	}
	election.RegisterFlags(fs, &o.etcd)
	return fs
}

// parse reads the command line (flags, environment, config file); a
// request for help is flag.ErrHelp.
func parse(args []string) (options, error) {
	o := options{cfg: httpserver.Config{Config: lockserver.DefaultConfig(), DataDir: defaultDataDir}, etcd: election.DefaultOptions()}
	fs := flags(&o)
	if err := cli.Parse(fs, args); err != nil {
		return o, err
	}
	if o.drainTimeout < 0 {
		return o, fmt.Errorf("--drain-timeout %v: must not be negative", o.drainTimeout)
	}
	if err := o.cfg.CheckLeaseTTL(); err != nil {
		return o, err
	}
	return o, o.etcd.Validate()
}

func run(args []string) error {
	o, err := parse(args)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	if err != nil {
		return err
	}
	cfg := o.cfg
	if err := cli.SetLogLevel(o.logLevel); err != nil {
		return err
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	srv, replica, err := open(o)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", o.listen)
	if err != nil {
		srv.Shutdown(context.Background())
		return err
	}
	if replica != nil {
		// The replica campaigns once it can be reached: a leader's
		// standbys send clients to its advertised URL.
		rctx, stopReplica := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); replica.run(rctx, srv.Handler()) }()
		defer func() { stopReplica(); <-done; replica.close() }()
		go func() { <-ctx.Done(); stopReplica() }()
	}
	l := log.G(ctx).WithField("listen", ln.Addr().String())
	if replica != nil {
		l = l.WithField("etcd", o.etcd.Endpoints).WithField("advertise_url", o.etcd.AdvertiseURL).WithField("etcd_session_ttl", o.etcd.SessionTTL)
	} else {
		l = l.WithField("data_dir", cfg.DataDir)
	}
	l.WithField("version", version.Get().Version).WithField("shards", cfg.Shards).WithField("lease_ttl", cfg.LeaseTTL).
		WithField("tls", cfg.TLSCert != "").WithField("auth", cfg.Identity()).
		Info("sharedcontent-lockserver serving")

	errCh := make(chan error, 1)
	go func() { errCh <- srv.Serve(ln) }()
	// The listener is bound: connections queue until Serve accepts them.
	cli.Notify(ctx, daemon.SdNotifyReady+"\nSTATUS=serving on "+ln.Addr().String())
	select {
	case err = <-errCh:
		log.G(ctx).WithError(err).Error("serve failed")
	case <-ctx.Done():
		log.G(ctx).Info("shutting down")
	}
	cli.Notify(ctx, daemon.SdNotifyStopping)
	sctx, cancel := context.WithTimeout(context.Background(), o.drainTimeout)
	defer cancel()
	return errors.Join(err, srv.Shutdown(sctx))
}
