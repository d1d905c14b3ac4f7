package hostinstall

import (
	_ "embed"
	"fmt"
	"strings"

	"github.com/containerd/errdefs"
)

// dropIn is containerd's drop-in, a copy of deploy/containerd-config.toml
// without its comments (deploy/check's TestContainerdDropIn keeps them
// equal), for the default socket and platform.
//
//go:embed sharedcontent.toml
var dropIn string

const (
	dropInAddress  = `"/run/sharedcontent/sharedcontent.sock"`
	dropInPlatform = `platform = "linux/amd64"`
)

// renderDropIn returns the drop-in pointing at the daemon's socket, unpacking
// for the node's platform.
func renderDropIn(address, platform string) (string, error) {
	if strings.Count(dropIn, dropInAddress) != 2 || strings.Count(dropIn, dropInPlatform) != 1 {
		return "", fmt.Errorf("the embedded drop-in lost its socket address or platform line: %w", errdefs.ErrInternal)
	}
	s := strings.ReplaceAll(dropIn, dropInAddress, quote(address))
	s = strings.Replace(s, dropInPlatform, "platform = "+quote(platform), 1)
	return installedMarker + "\n# containerd's content and diff proxies (docs/design.md §6); uninstalling\n# removes this file and restarts containerd on its own store.\n" + s, nil
}

// renderUnit returns the systemd unit: deploy/systemd/containerd-sharedcontent.service
// (a test keeps their directives equal) with this installer's binary and
// environment file, wanted by containerd.service too.
func renderUnit() string {
	return installedMarker + `
# Derived from deploy/systemd/containerd-sharedcontent.service.
[Unit]
Description=sharedcontent content and diff plugin for containerd
Documentation=https://github.com/sharedcontent/sharedcontent
After=network-online.target remote-fs.target
Wants=network-online.target
# containerd talks to the plugin's socket: start the plugin first, stop it last.
Before=containerd.service

[Service]
# READY=1 (sd_notify) once the socket serves: containerd, ordered after this
# unit, starts only when its content and diff proxies answer.
Type=notify
TimeoutStartSec=120
EnvironmentFile=` + EnvPath + `
ExecStart=` + BinaryPath + `
Restart=always
RestartSec=2
KillSignal=SIGTERM
# SIGTERM drains the pulls in flight for up to --drain-timeout (30 s), then
# the rest stops within 10 s.
TimeoutStopSec=45

[Install]
# At boot, and whenever containerd is started, this unit is started first
# (Before= orders it; Wants= from containerd.service pulls it in) without
# binding containerd to it: containerd still starts if the daemon fails.
WantedBy=multi-user.target containerd.service
`
}

// EnvVar is one of the daemon's settings, SHAREDCONTENT_<FLAG>=Value
// (cmd/internal/cli).
type EnvVar struct{ Name, Value string }

// renderEnv returns the environment file, one variable a line, each
// value double-quoted as systemd's EnvironmentFile reads it. A name that
// is not a shell-style identifier, or a value with a line break, is refused.
func renderEnv(env []EnvVar) (string, error) {
	var b strings.Builder
	b.WriteString(installedMarker + "\n# The settings of containerd-sharedcontent (docs/operations.md, \"Flags and environment\").\n")
	for _, e := range env {
		if !validEnvName(e.Name) {
			return "", fmt.Errorf("environment variable %q: not a name systemd reads: %w", e.Name, errdefs.ErrInvalidArgument)
		}
		if strings.ContainsAny(e.Value, "\n\r") {
			return "", fmt.Errorf("environment variable %s: a value with a line break: %w", e.Name, errdefs.ErrInvalidArgument)
		}
		fmt.Fprintf(&b, "%s=%s\n", e.Name, quote(e.Value))
	}
	return b.String(), nil
}

func validEnvName(s string) bool {
	if s == "" || (s[0] >= '0' && s[0] <= '9') {
		return false
	}
	for _, c := range s {
		if !(c == '_' || c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

// quote double-quotes s, escaping backslashes and quotes, as both TOML
// basic strings and systemd's EnvironmentFile read it.
func quote(s string) string {
	r := strings.NewReplacer(`\`, `\\`, `"`, `\"`)
	return `"` + r.Replace(s) + `"`
}
