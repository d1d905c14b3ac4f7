package cli

import (
	"context"

	"github.com/containerd/log"
	"github.com/coreos/go-systemd/v22/daemon"
)

// Notify tells systemd (Type=notify units, NOTIFY_SOCKET) the daemon's
// state, e.g. daemon.SdNotifyReady once it serves. Without NOTIFY_SOCKET
// it does nothing; a failure is logged, not returned: readiness is
// advisory.
func Notify(ctx context.Context, state string) {
	if _, err := daemon.SdNotify(false, state); err != nil {
		log.G(ctx).WithError(err).Warn("systemd notification failed")
	}
}
