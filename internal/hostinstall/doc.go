// Package hostinstall installs the node daemon as a host service ordered
// before containerd, from a privileged pod that sees the host's root
// (docs/design.md §6.1): the way stargz-snapshotter's and SOCI's
// installers keep "the daemon serves before containerd" on every boot,
// which a daemon in a pod cannot.
//
// Install writes, each atomically and only when its content changed, the
// daemon's binary, its environment file, a systemd unit ordered
// Before=containerd.service and containerd's drop-in
// (/etc/containerd/conf.d/sharedcontent.toml), then drives the host's
// service manager (systemctl, through nsenter into PID 1's namespaces):
// it restarts the unit only when the unit's files changed, waits for the
// host daemon to serve, and restarts containerd only when the drop-in was
// new or changed. It refuses, changing nothing, a node whose containerd
// config does not import conf.d. Uninstall undoes it, leaving the shared
// root and the daemon's state directory. Keep holds the pod until it is
// stopped, then asks the API server whether the pod's DaemonSet is gone
// (uninstall) or still there (an upgrade, a drain: the host service keeps
// serving).
package hostinstall
