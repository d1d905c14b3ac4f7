package hostinstall

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"time"

	"github.com/containerd/errdefs"
	"github.com/containerd/log"
)

// DefaultReadyTimeout bounds the wait for the host daemon to serve; the
// unit's TimeoutStartSec is as long.
const DefaultReadyTimeout = 2 * time.Minute

// Config is what Install writes and how it reaches the host.
type Config struct {
	// HostRoot is where the host's / is mounted in the pod (/host).
	HostRoot string
	// Binary is the daemon binary to copy (the installer's own).
	Binary string
	// Env are the daemon's settings, written to EnvPath.
	Env []EnvVar
	// Files are files of the pod copied onto the host (a token, a CA
	// from a Secret), mode 0400, before the daemon starts.
	Files []File
	// Address is the daemon's socket (its --address), a host path: the
	// drop-in's proxies point at it.
	Address string
	// ReadyURL is the host daemon's /readyz (its --metrics-listen) as
	// the pod reaches it; empty: a connection to Address.
	ReadyURL string
	// ReadyTimeout bounds the wait for the daemon to serve (default
	// DefaultReadyTimeout).
	ReadyTimeout time.Duration
	// ContainerdRoot is containerd's root on the host, whose own content
	// store is adopted into the shared store at the switch (default
	// DefaultContainerdRoot).
	ContainerdRoot string
	// ContainerdSocket is containerd's API socket on the host, through
	// which Uninstall restores containerd's own store (default
	// DefaultContainerdSocket).
	ContainerdSocket string
	// ContainerdConfig is containerd's main config on the host (default
	// DefaultContainerdConfig).
	ContainerdConfig string
	// Platform is the platform containerd unpacks for (default the
	// installer's own, e.g. linux/amd64).
	Platform string
	// Systemctl is the command prefix of the host's systemctl (default
	// DefaultSystemctl).
	Systemctl []string
	// SystemctlRoot is the directory Systemctl runs chrooted into, where
	// a command named without a slash is looked up: the host's / (the
	// image has neither nsenter nor systemctl). Empty: the pod's own.
	SystemctlRoot string
}

// File is a file of the pod, Source, installed on the host at Target.
type File struct{ Source, Target string }

// Result says what Install changed.
type Result struct {
	// Changed are the host paths written.
	Changed []string
	// RestartedDaemon: the unit was (re)started because its files changed.
	RestartedDaemon bool
	// RestartedContainerd: containerd was restarted because the drop-in
	// was new or changed.
	RestartedContainerd bool
}

func (c *Config) defaults() error {
	if c.ContainerdRoot == "" {
		c.ContainerdRoot = DefaultContainerdRoot
	}
	if c.ContainerdSocket == "" {
		c.ContainerdSocket = DefaultContainerdSocket
	}
	if c.ContainerdConfig == "" {
		c.ContainerdConfig = DefaultContainerdConfig
	}
	if c.Platform == "" {
		c.Platform = runtime.GOOS + "/" + runtime.GOARCH
	}
	if len(c.Systemctl) == 0 {
		c.Systemctl = DefaultSystemctl
	}
	if c.ReadyTimeout <= 0 {
		c.ReadyTimeout = DefaultReadyTimeout
	}
	for name, p := range map[string]string{"host root": c.HostRoot, "daemon socket": c.Address, "containerd config": c.ContainerdConfig} {
		if !filepath.IsAbs(p) {
			return fmt.Errorf("%s %q: an absolute path is required: %w", name, p, errdefs.ErrInvalidArgument)
		}
	}
	for _, f := range c.Files {
		if !filepath.IsAbs(f.Source) || !filepath.IsAbs(f.Target) {
			return fmt.Errorf("file %s to %s: absolute paths are required: %w", f.Source, f.Target, errdefs.ErrInvalidArgument)
		}
	}
	return nil
}

// host returns the pod's path of the host path p.
func (c *Config) host(p string) string { return filepath.Join(c.HostRoot, p) }

// Install installs the daemon as a host service ordered before containerd
// and switches containerd to it (the package's doc). Bad input, a node
// whose containerd config does not import the drop-in, and a unit or
// drop-in someone else wrote are refused before anything is written.
func Install(ctx context.Context, c Config) (Result, error) {
	var res Result
	if err := c.defaults(); err != nil {
		return res, err
	}
	if err := checkImports(c.HostRoot, c.ContainerdConfig, DropInPath); err != nil {
		return res, err
	}
	for _, p := range []string{UnitPath, EnvPath, DropInPath} {
		if err := ownedOrAbsent(c.host(p)); err != nil {
			return res, err
		}
	}
	env, err := renderEnv(c.Env)
	if err != nil {
		return res, err
	}
	drop, err := renderDropIn(c.Address, c.Platform)
	if err != nil {
		return res, err
	}
	bin, err := os.ReadFile(c.Binary)
	if err != nil {
		return res, fmt.Errorf("reading the daemon's binary: %w", err)
	}
	type file struct {
		path    string
		content []byte
		mode    os.FileMode
	}
	files := []file{{BinaryPath, bin, 0o755}}
	for _, f := range c.Files {
		b, err := os.ReadFile(f.Source)
		if err != nil {
			return res, fmt.Errorf("file for the host daemon: %w", err)
		}
		files = append(files, file{f.Target, b, 0o400})
	}
	files = append(files, file{EnvPath, []byte(env), 0o644}, file{UnitPath, []byte(renderUnit()), 0o644})

	sc := systemctl{c.Systemctl, c.SystemctlRoot}
	unitChanged := false
	for _, f := range files {
		changed, err := writeFile(c.host(f.path), f.content, f.mode)
		if err != nil {
			return res, fmt.Errorf("installing %s: %w", f.path, err)
		}
		if changed {
			res.Changed = append(res.Changed, f.path)
			unitChanged = unitChanged || f.path == UnitPath
		}
	}
	if unitChanged {
		if err := sc.run(ctx, "daemon-reload"); err != nil {
			return res, err
		}
	}
	if len(res.Changed) > 0 {
		// A clean stop ends the old daemon's session; the new one serves
		// at once (docs/design.md §8.5).
		if err := sc.run(ctx, "enable", Unit); err != nil {
			return res, err
		}
		if err := sc.run(ctx, "restart", Unit); err != nil {
			return res, err
		}
		res.RestartedDaemon = true
	} else if err := sc.run(ctx, "start", Unit); err != nil {
		return res, err
	}
	rctx, cancel := context.WithTimeout(ctx, c.ReadyTimeout)
	err = waitReady(rctx, c.HostRoot, c.ReadyURL, c.Address)
	cancel()
	if err != nil {
		return res, err
	}
	log.G(ctx).WithField("changed", res.Changed).WithField("restarted", res.RestartedDaemon).Info("the host daemon serves")

	// Before containerd is switched, what it holds on its own store goes
	// into the shared store (adopt.go).
	if _, err := os.Stat(c.host(DropInPath)); errors.Is(err, os.ErrNotExist) {
		if _, err := adoptLocalContent(ctx, c.HostRoot, c.ContainerdRoot, c.Address); err != nil {
			return res, err
		}
	}

	// Only now, with the daemon serving, does containerd learn of it: a
	// containerd restarted in between would otherwise lose its images.
	changed, err := writeFile(c.host(DropInPath), []byte(drop), 0o644)
	if err != nil {
		return res, fmt.Errorf("installing %s: %w", DropInPath, err)
	}
	if changed {
		res.Changed = append(res.Changed, DropInPath)
		if err := sc.run(ctx, "restart", containerdUnit); err != nil {
			return res, err
		}
		res.RestartedContainerd = true
		log.G(ctx).Info("containerd restarted on the shared store")
	}
	return res, nil
}

// Uninstall undoes Install: it removes containerd's drop-in and restarts
// containerd (on its own content store again), stops and disables the
// unit, and removes the files Install wrote. The shared root and the
// daemon's state directory stay. A unit or drop-in someone else wrote is
// left alone. Each step runs even when an earlier one failed; the errors
// are joined.
func Uninstall(ctx context.Context, c Config) error {
	if err := c.defaults(); err != nil {
		return err
	}
	sc := systemctl{c.Systemctl, c.SystemctlRoot}
	var errs []error
	if err := ownedOrAbsent(c.host(DropInPath)); err != nil {
		errs = append(errs, err)
	} else {
		if _, err := os.Stat(c.host(DropInPath)); err == nil {
			// containerd still reads the shared store: what it recorded
			// there goes into its own store first (adopt.go). A failure
			// is reported; the switch back happens all the same.
			if _, err := restoreLocalContent(ctx, c.HostRoot, c.ContainerdRoot, c.ContainerdSocket); err != nil {
				errs = append(errs, err)
			}
		}
		if removed, err := removeFile(c.host(DropInPath)); err != nil {
			errs = append(errs, err)
		} else if removed {
			errs = append(errs, sc.run(ctx, "restart", containerdUnit))
		}
	}
	if err := ownedOrAbsent(c.host(UnitPath)); err != nil {
		return errors.Join(append(errs, err)...)
	}
	if _, err := os.Stat(c.host(UnitPath)); err == nil {
		errs = append(errs, sc.run(ctx, "stop", Unit), sc.run(ctx, "disable", Unit))
	}
	paths := []string{BinaryPath, EnvPath, UnitPath}
	for _, f := range c.Files {
		paths = append(paths, f.Target)
	}
	for _, p := range paths {
		if _, err := removeFile(c.host(p)); err != nil {
			errs = append(errs, err)
		}
	}
	errs = append(errs, sc.run(ctx, "daemon-reload"))
	return errors.Join(errs...)
}
