package hostinstall

// The host paths Install writes (Uninstall removes them). They are the
// host's own: Config.HostRoot is prefixed to reach them from the pod.
const (
	// BinaryPath is the daemon's binary, a copy of the installer's own.
	BinaryPath = "/opt/sharedcontent/bin/containerd-sharedcontent"
	// EnvPath holds the daemon's settings as SHAREDCONTENT_* variables,
	// the unit's EnvironmentFile.
	EnvPath = "/etc/sharedcontent/containerd-sharedcontent.env"
	// Unit is the systemd unit's name, UnitPath its file.
	Unit     = "containerd-sharedcontent.service"
	UnitPath = "/etc/systemd/system/" + Unit
	// DropInPath is containerd's drop-in: the content and diff proxies.
	DropInPath = "/etc/containerd/conf.d/sharedcontent.toml"
	// DefaultContainerdConfig is containerd's main config, which must
	// import DropInPath.
	DefaultContainerdConfig = "/etc/containerd/config.toml"
	// containerdUnit is the unit restarted when the drop-in changes.
	containerdUnit = "containerd.service"
)

// installedMarker opens every file Install writes but the binary: a unit
// or drop-in without it was written by someone else, and Install refuses
// to replace it.
const installedMarker = "# Installed by `containerd-sharedcontent install` (docs/design.md §6.1): the next install rewrites this file."
