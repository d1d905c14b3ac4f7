package main

import (
	"flag"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	"github.com/containerd/errdefs"
	"github.com/containerd/log"

	"github.com/sharedcontent/sharedcontent/cmd/internal/cli"
	"github.com/sharedcontent/sharedcontent/internal/hostinstall"
)

// keeperGrace bounds the keeper's decision and uninstall once stopped;
// the chart's terminationGracePeriodSeconds is longer.
const keeperGrace = 90 * time.Second

// installOptions are the flags of `containerd-sharedcontent install`.
type installOptions struct {
	cfg                 hostinstall.Config
	systemctl, logLevel string
	ds                  hostinstall.DaemonSet
	namespaceFile       string
	once, uninstall     bool
	systemctlInPod      bool
	daemonArgs          []string
}

// installUsage heads `install -h`.
const installUsage = `usage: containerd-sharedcontent install [flags] -- DAEMON FLAGS

Installs this binary as the host service containerd-sharedcontent.service,
ordered before containerd, from a privileged pod with the host's / at
--host-root, and switches containerd to it (docs/design.md §6.1). DAEMON
FLAGS are the daemon's own flags, each --name=value, written to its
environment file as SHAREDCONTENT_NAME. Then, unless --once, it stays: when
stopped, it uninstalls the host service if its DaemonSet is gone.`

func parseInstall(args []string) (installOptions, error) {
	o := installOptions{}
	fs := flag.NewFlagSet("containerd-sharedcontent install", flag.ContinueOnError)
	fs.Usage = cli.Usage(fs, installUsage)
	fs.StringVar(&o.cfg.HostRoot, "host-root", "/host", "where the host's / is mounted")
	fs.StringVar(&o.systemctl, "systemctl", strings.Join(hostinstall.DefaultSystemctl, " "), "the host's systemctl command, split at spaces")
	fs.BoolVar(&o.systemctlInPod, "systemctl-in-pod", false, "run --systemctl in this pod's filesystem, not chrooted into --host-root (where the host's nsenter and systemctl are)")
	fs.Func("file", "SOURCE:TARGET: copy the pod's file SOURCE to the host path TARGET (mode 0400) for the daemon, e.g. a token from a Secret (repeatable)", func(v string) error {
		src, dst, ok := strings.Cut(v, ":")
		if !ok || src == "" || dst == "" {
			return fmt.Errorf("%q: want SOURCE:TARGET", v)
		}
		o.cfg.Files = append(o.cfg.Files, hostinstall.File{Source: src, Target: dst})
		return nil
	})
	fs.StringVar(&o.cfg.ContainerdConfig, "containerd-config", hostinstall.DefaultContainerdConfig, "containerd's main config on the host; it must import "+hostinstall.DropInPath)
	fs.StringVar(&o.cfg.ReadyURL, "ready-url", "", "the host daemon's /readyz as this pod reaches it (default: from the daemon's --metrics-listen, on 127.0.0.1 for an unspecified address; without it, a connection to its socket)")
	fs.DurationVar(&o.cfg.ReadyTimeout, "ready-timeout", hostinstall.DefaultReadyTimeout, "how long to wait for the host daemon to serve")
	fs.StringVar(&o.ds.Name, "daemonset", "", "the pod's DaemonSet: once stopped, the keeper uninstalls when it is gone (empty: never uninstall)")
	fs.StringVar(&o.ds.Namespace, "namespace", "", "the DaemonSet's namespace (default: the service account's)")
	fs.StringVar(&o.ds.APIServer, "api-server", "", "the API server's URL as this pod reaches it (default: https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT, the kubernetes Service, which needs kube-proxy)")
	fs.StringVar(&o.ds.TokenFile, "token-file", hostinstall.DefaultTokenFile, "the service account token")
	fs.StringVar(&o.ds.CAFile, "api-ca", hostinstall.DefaultCAFile, "the API server's CA")
	fs.StringVar(&o.namespaceFile, "namespace-file", hostinstall.DefaultNamespaceFile, "file naming the pod's namespace")
	fs.BoolVar(&o.once, "once", false, "install, then exit (no keeper)")
	fs.BoolVar(&o.uninstall, "uninstall", false, "uninstall the host service, then exit")
	fs.StringVar(&o.logLevel, "log-level", "info", "log level: trace, debug, info, warn, error")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	o.daemonArgs = fs.Args()
	o.cfg.Systemctl = strings.Fields(o.systemctl)
	if len(o.cfg.Systemctl) == 0 {
		return o, fmt.Errorf("--systemctl is empty: %w", errdefs.ErrInvalidArgument)
	}
	if !o.systemctlInPod {
		o.cfg.SystemctlRoot = o.cfg.HostRoot
	}
	if o.uninstall && len(o.daemonArgs) == 0 {
		// Uninstalling needs none of the daemon's settings.
		o.cfg.Address = defaultAddress
		return o, nil
	}
	d, err := daemonSettings(o.daemonArgs)
	if err != nil {
		return o, err
	}
	o.cfg.Env = d.env
	o.cfg.Address = d.opts.address
	if o.cfg.ReadyURL == "" && d.opts.metricsListen != "" {
		o.cfg.ReadyURL, err = readyURL(d.opts.metricsListen)
		if err != nil {
			return o, err
		}
	}
	if o.ds.Name != "" && !o.uninstall {
		if o.ds.Namespace == "" {
			b, err := os.ReadFile(o.namespaceFile)
			if err != nil {
				return o, fmt.Errorf("--namespace not given and the pod's namespace unknown: %w", err)
			}
			o.ds.Namespace = strings.TrimSpace(string(b))
		}
		if o.ds.APIServer == "" {
			host, port := os.Getenv("KUBERNETES_SERVICE_HOST"), os.Getenv("KUBERNETES_SERVICE_PORT")
			if host == "" || port == "" {
				return o, fmt.Errorf("--api-server not given and KUBERNETES_SERVICE_HOST/PORT unset: %w", errdefs.ErrInvalidArgument)
			}
			o.ds.APIServer = "https://" + net.JoinHostPort(host, port)
		}
	}
	return o, nil
}

// daemonConfig is the host daemon's configuration, from its flags.
type daemonConfig struct {
	opts options
	env  []hostinstall.EnvVar
}

// daemonSettings checks args with the daemon's own flag set and returns
// them as its environment (cmd/internal/cli): each --name=value (a bool
// flag may be --name) as SHAREDCONTENT_NAME=value. --config is refused:
// the pod's file is not the host's.
func daemonSettings(args []string) (daemonConfig, error) {
	var d daemonConfig
	fs := newFlagSet(&d.opts)
	for _, a := range args {
		name, value, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		f := fs.Lookup(name)
		switch {
		case !strings.HasPrefix(a, "-") || name == "":
			return d, fmt.Errorf("daemon argument %q: want --name=value: %w", a, errdefs.ErrInvalidArgument)
		case f == nil:
			return d, fmt.Errorf("daemon argument %q: containerd-sharedcontent has no flag --%s: %w", a, name, errdefs.ErrInvalidArgument)
		case name == cli.ConfigFlag:
			return d, fmt.Errorf("daemon argument %q: a config file of the pod is not the host's; give its settings as flags: %w", a, errdefs.ErrInvalidArgument)
		case !hasValue:
			if bf, ok := f.Value.(interface{ IsBoolFlag() bool }); !ok || !bf.IsBoolFlag() {
				return d, fmt.Errorf("daemon argument %q: want --%s=value: %w", a, name, errdefs.ErrInvalidArgument)
			}
			value = "true"
		}
		d.env = append(d.env, hostinstall.EnvVar{Name: cli.EnvName(name), Value: value})
	}
	if err := fs.Parse(args); err != nil {
		return d, fmt.Errorf("daemon flags: %w", err)
	}
	if err := d.opts.check(); err != nil {
		return d, fmt.Errorf("daemon flags: %w", err)
	}
	return d, nil
}

// readyURL is the /readyz of a daemon listening on listen, as reached from
// its own host: an unspecified address on the loopback.
func readyURL(listen string) (string, error) {
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return "", fmt.Errorf("daemon flag --metrics-listen %q: %v: %w", listen, err, errdefs.ErrInvalidArgument)
	}
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		host = "127.0.0.1"
	}
	return "http://" + net.JoinHostPort(host, port) + "/readyz", nil
}

// runInstall is `containerd-sharedcontent install`.
func runInstall(args []string) error {
	o, ctx, stop, err := begin(args, parseInstall, func(o installOptions) string { return o.logLevel })
	defer stop()
	if ctx == nil {
		return err
	}
	if o.cfg.Binary, err = os.Executable(); err != nil {
		return err
	}
	if o.uninstall {
		return hostinstall.Uninstall(ctx, o.cfg)
	}
	verified := false
	if o.ds.Name != "" {
		// Before anything changes: a keeper refused its DaemonSet could not
		// tell an uninstall from an upgrade. An API server out of reach
		// does not stop the node's install (after a reboot, say): the
		// keeper then never takes a refusal for an uninstall.
		err := hostinstall.CheckAccess(ctx, o.ds)
		switch {
		case errdefs.IsUnavailable(err):
			log.G(ctx).WithError(err).Warn("the API server cannot be asked: installing; when stopped, only a DaemonSet seen gone uninstalls")
		case err != nil:
			return err
		default:
			verified = true
		}
	}
	res, err := hostinstall.Install(ctx, o.cfg)
	if err != nil {
		return err
	}
	log.G(ctx).WithField("changed", res.Changed).WithField("daemon_restarted", res.RestartedDaemon).
		WithField("containerd_restarted", res.RestartedContainerd).Info("installed; the host service serves containerd")
	if o.once {
		return nil
	}
	if o.ds.Name == "" {
		<-ctx.Done()
		return nil
	}
	_, err = hostinstall.Keep(ctx, o.cfg, o.ds, verified, keeperGrace)
	return err
}
