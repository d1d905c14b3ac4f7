package hostinstall

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/containerd/errdefs"
	"github.com/containerd/log"
)

// DefaultSystemctl runs the host's systemctl from the pod (hostPID): in
// PID 1's mount, UTS, IPC, network and PID namespaces, so that it talks to
// the host's systemd over the host's own bus. The image holds no nsenter:
// the command runs chrooted into the host's / (Config.SystemctlRoot), where
// the host's own nsenter is found with its libraries.
var DefaultSystemctl = []string{"nsenter", "--target", "1", "--mount", "--uts", "--ipc", "--net", "--pid", "--", "systemctl"}

// searchPath is where a command named without a slash is looked for in
// the host's /.
var searchPath = []string{"/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"}

// systemctl is the host's service manager: the command prefix, then a
// verb and its arguments, run chrooted into root (when not empty).
// Install and Uninstall use only daemon-reload, enable, disable, start,
// stop and restart.
type systemctl struct {
	prefix []string
	root   string
}

func (s systemctl) run(ctx context.Context, args ...string) error {
	if len(s.prefix) == 0 {
		return fmt.Errorf("no systemctl command: %w", errdefs.ErrInvalidArgument)
	}
	argv := append(append([]string{}, s.prefix...), args...)
	log.G(ctx).WithField("command", strings.Join(argv, " ")).Debug("systemctl")
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	if s.root != "" {
		path, err := s.find(argv[0])
		if err != nil {
			return err
		}
		cmd = exec.CommandContext(ctx, path, argv[1:]...)
		cmd.Dir = "/"
		cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: s.root}
	}
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("systemctl %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(out.String()))
	}
	return nil
}

// find returns the path, in root, of the command name.
func (s systemctl) find(name string) (string, error) {
	if strings.Contains(name, "/") {
		return name, nil
	}
	for _, dir := range searchPath {
		p := filepath.Join(dir, name)
		if st, err := os.Stat(filepath.Join(s.root, p)); err == nil && !st.IsDir() && st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s: not found in the host's %s (mounted at %s): %w", name, strings.Join(searchPath, ":"), s.root, errdefs.ErrNotFound)
}
