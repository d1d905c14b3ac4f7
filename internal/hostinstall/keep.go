package hostinstall

import (
	"context"
	"fmt"

	"github.com/containerd/errdefs"
	"github.com/containerd/log"
)

// CheckAccess returns nil when ds can be looked up and exists: the
// keeper relies on it to tell an uninstall from an upgrade, so that a
// later 401 or 403 means the release's credentials were removed with it,
// never that they were missing from the start.
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

// Keep waits until ctx ends (the pod is stopped), then decides: when its
// DaemonSet is gone, being deleted, or no longer lets the pod read it
// (helm uninstall removed it with the pod's Role), it uninstalls the host
// service; otherwise (an upgrade, the pod deleted under OnDelete, a drain)
// it leaves the host service serving. When the API server cannot be
// asked, it leaves it too: a node keeps working, and a later install or
// uninstall finds it. It returns whether it uninstalled. stop is the
// context of the decision and the uninstall (the pod's grace period).
func Keep(ctx, stop context.Context, c Config, ds DaemonSet) (bool, error) {
	<-ctx.Done()
	st, err := ds.Lookup(stop)
	if err != nil {
		log.G(stop).WithError(err).Warn("cannot tell an uninstall from an upgrade: the host service keeps serving")
		return false, nil
	}
	if st == DaemonSetPresent {
		log.G(stop).Info("the DaemonSet remains (an upgrade, a drain, a pod deleted): the host service keeps serving")
		return false, nil
	}
	log.G(stop).WithField("daemonset", ds.Namespace+"/"+ds.Name).Info("the DaemonSet is gone: uninstalling the host service")
	return true, Uninstall(stop, c)
}
