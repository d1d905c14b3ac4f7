package hostinstall

import (
	"context"
	"fmt"
	"time"

	"github.com/containerd/errdefs"
	"github.com/containerd/log"
)

// CheckAccess returns nil when ds can be looked up and exists: the
// keeper relies on it to tell an uninstall from an upgrade, so that a
// later 401 or 403 means the release's credentials were removed with it,
// never that they were missing from the start. An API server that cannot
// be reached is an error of class unavailable, which the caller may
// accept: the keeper then never takes a refusal for an uninstall.
func CheckAccess(ctx context.Context, ds DaemonSet) error {
	st, err := ds.Lookup(ctx)
	if err != nil {
		return err
	}
	switch st {
	case DaemonSetForbidden:
		return fmt.Errorf("the API server refuses to let this pod get daemonset %s/%s: the keeper could not tell an uninstall from an upgrade (the chart's Role grants get on it): %w", ds.Namespace, ds.Name, errdefs.ErrPermissionDenied)
	case DaemonSetGone:
		return fmt.Errorf("daemonset %s/%s does not exist: %w", ds.Namespace, ds.Name, errdefs.ErrNotFound)
	}
	return nil
}

// Keep waits until ctx ends (the pod is stopped), then decides, within
// grace: when its DaemonSet is gone or being deleted (helm uninstall), it
// uninstalls the host service; also when the pod's credentials are refused
// and verified says they worked at start (helm uninstall removed them with
// the DaemonSet). Otherwise (an upgrade, the pod deleted under OnDelete, a
// drain) it leaves the host service serving; also when the API server
// cannot be asked: a node keeps working, and a later install or uninstall
// finds it. It returns whether it uninstalled.
func Keep(ctx context.Context, c Config, ds DaemonSet, verified bool, grace time.Duration) (bool, error) {
	<-ctx.Done()
	stop, cancel := context.WithTimeout(context.WithoutCancel(ctx), grace)
	defer cancel()
	st, err := ds.Lookup(stop)
	if err != nil {
		log.G(stop).WithError(err).Warn("cannot tell an uninstall from an upgrade: the host service keeps serving")
		return false, nil
	}
	if st == DaemonSetPresent || st == DaemonSetForbidden && !verified {
		log.G(stop).WithField("state", st).Info("the DaemonSet remains (an upgrade, a drain, a pod deleted), or its access was never verified: the host service keeps serving")
		return false, nil
	}
	log.G(stop).WithField("daemonset", ds.Namespace+"/"+ds.Name).Info("the DaemonSet is gone: uninstalling the host service")
	return true, Uninstall(stop, c)
}
