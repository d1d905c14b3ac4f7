package hostinstall

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"strings"

	"github.com/containerd/log"
)

// DefaultSystemctl runs the host's systemctl from the pod (hostPID): in
// PID 1's mount, UTS, IPC, network and PID namespaces, so that it talks to
// the host's systemd over the host's own bus.
var DefaultSystemctl = []string{"nsenter", "--target", "1", "--mount", "--uts", "--ipc", "--net", "--pid", "--", "systemctl"}

// systemctl is the host's service manager: the command Prefix, then a
// verb and its arguments. Install and Uninstall use only daemon-reload,
// enable, disable, start, stop and restart.
type systemctl struct{ prefix []string }

func (s systemctl) run(ctx context.Context, args ...string) error {
	if len(s.prefix) == 0 {
		return fmt.Errorf("no systemctl command")
	}
	argv := append(append([]string{}, s.prefix...), args...)
	log.G(ctx).WithField("command", strings.Join(argv, " ")).Debug("systemctl")
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("systemctl %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(out.String()))
	}
	return nil
}
