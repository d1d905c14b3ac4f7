package hostinstall

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/containerd/errdefs"
	"github.com/pelletier/go-toml/v2"
	"github.com/stretchr/testify/require"
)

var unitCalls = []string{"daemon-reload", "enable " + Unit, "restart " + Unit}

// TestInstall: a first install writes the binary, the token, the
// environment, the unit and containerd's drop-in; reloads systemd, enables
// and restarts the unit, and restarts containerd only after the daemon
// serves. Run again, it changes nothing and restarts nothing.
func TestInstall(t *testing.T) {
	n := newNode(t)
	n.serve(t)
	res, err := Install(testCtx(t), n.cfg)
	require.NoError(t, err)
	require.Equal(t, []string{BinaryPath, "/etc/sharedcontent/auth-token", EnvPath, UnitPath, DropInPath}, res.Changed)
	require.True(t, res.RestartedDaemon)
	require.True(t, res.RestartedContainerd)
	require.Equal(t, append(unitCalls, "restart containerd.service"), n.takeCalls(t))

	require.Equal(t, "the daemon, version 1", n.read(t, BinaryPath))
	for p, mode := range map[string]os.FileMode{BinaryPath: 0o755, "/etc/sharedcontent/auth-token": 0o400, EnvPath: 0o644, UnitPath: 0o644, DropInPath: 0o644} {
		st, err := os.Stat(filepath.Join(n.root, p))
		require.NoError(t, err)
		require.Equal(t, mode, st.Mode().Perm(), p)
	}
	require.Equal(t, "secret-token\n", n.read(t, "/etc/sharedcontent/auth-token"))
	require.Contains(t, n.read(t, EnvPath), "\nSHAREDCONTENT_ROOT=\"/mnt/shared/containerd-content\"\n")
	require.Contains(t, n.read(t, EnvPath), "\nSHAREDCONTENT_AUTH_TOKEN_FILE=\"/etc/sharedcontent/auth-token\"\n")
	unit := n.read(t, UnitPath)
	for _, line := range []string{"Type=notify", "Before=containerd.service", "ExecStart=" + BinaryPath, "EnvironmentFile=" + EnvPath, "Restart=always", "WantedBy=multi-user.target containerd.service"} {
		require.Contains(t, unit, "\n"+line+"\n")
	}
	var drop struct {
		ProxyPlugins map[string]struct{ Address string } `toml:"proxy_plugins"`
	}
	require.NoError(t, toml.Unmarshal([]byte(n.read(t, DropInPath)), &drop))
	require.Len(t, drop.ProxyPlugins, 2)
	for name, p := range drop.ProxyPlugins {
		require.Equal(t, n.cfg.Address, p.Address, name)
	}
	require.Empty(t, leftovers(t, n), "no temporary file is left")

	res, err = Install(testCtx(t), n.cfg)
	require.NoError(t, err)
	require.Equal(t, Result{}, res, "nothing changed")
	require.Equal(t, []string{"start " + Unit}, n.takeCalls(t), "no reload, no restart")
}

// TestInstallChanges: a new binary or setting restarts the daemon, not
// containerd; only a changed unit reloads systemd; only a changed drop-in
// (a new socket, a new platform) restarts containerd.
func TestInstallChanges(t *testing.T) {
	n := installedNode(t)

	require.NoError(t, os.WriteFile(n.cfg.Binary, []byte("the daemon, version 2"), 0o755))
	res, err := Install(testCtx(t), n.cfg)
	require.NoError(t, err)
	require.Equal(t, []string{BinaryPath}, res.Changed)
	require.Equal(t, []string{"enable " + Unit, "restart " + Unit}, n.takeCalls(t), "the upgrade: a clean restart of the unit")
	require.Equal(t, "the daemon, version 2", n.read(t, BinaryPath))

	n.cfg.Env = append(n.cfg.Env, EnvVar{"SHAREDCONTENT_LOG_LEVEL", "debug"})
	res, err = Install(testCtx(t), n.cfg)
	require.NoError(t, err)
	require.Equal(t, []string{EnvPath}, res.Changed)
	require.False(t, res.RestartedContainerd)
	require.Equal(t, []string{"enable " + Unit, "restart " + Unit}, n.takeCalls(t))

	n.cfg.Platform = "linux/arm64"
	res, err = Install(testCtx(t), n.cfg)
	require.NoError(t, err)
	require.Equal(t, []string{DropInPath}, res.Changed)
	require.True(t, res.RestartedContainerd)
	require.Equal(t, []string{"start " + Unit, "restart containerd.service"}, n.takeCalls(t))
	require.Contains(t, n.read(t, DropInPath), `platform = "linux/arm64"`)

	// The unit itself changed on the host (by hand): rewritten, reloaded.
	n.write(t, UnitPath, installedMarker+"\n[Service]\nExecStart=/bin/false\n")
	res, err = Install(testCtx(t), n.cfg)
	require.NoError(t, err)
	require.Equal(t, []string{UnitPath}, res.Changed)
	require.Equal(t, unitCalls, n.takeCalls(t))
}

// TestInstallRefuses: a node whose containerd would not read the drop-in,
// a unit someone else wrote, or settings systemd cannot read are refused
// with the fix named, before anything is written or any service touched.
func TestInstallRefuses(t *testing.T) {
	for name, tc := range map[string]struct {
		setup func(*testing.T, *node)
		want  string
		class error
	}{
		"no imports": {func(t *testing.T, n *node) {
			n.write(t, DefaultContainerdConfig, "version = 3\n[plugins]\n")
		}, "add the line " + importLine, errdefs.ErrFailedPrecondition},
		"imports elsewhere": {func(t *testing.T, n *node) {
			n.write(t, DefaultContainerdConfig, "version = 3\nimports = [\"/etc/containerd/other/*.toml\"]\n")
		}, "does not import " + DropInPath, errdefs.ErrFailedPrecondition},
		"no config": {func(t *testing.T, n *node) {
			require.NoError(t, os.Remove(filepath.Join(n.root, DefaultContainerdConfig)))
		}, "does not exist, so containerd reads no drop-in", errdefs.ErrFailedPrecondition},
		"operator's unit": {func(t *testing.T, n *node) {
			n.write(t, UnitPath, "[Service]\nExecStart=/usr/local/bin/containerd-sharedcontent\n")
		}, UnitPath + " exists and was not written by containerd-sharedcontent install", errdefs.ErrFailedPrecondition},
		"line break in a value": {func(t *testing.T, n *node) {
			n.cfg.Env = append(n.cfg.Env, EnvVar{"SHAREDCONTENT_LOG_LEVEL", "info\nExecStart=/bin/sh"})
		}, "SHAREDCONTENT_LOG_LEVEL: a value with a line break", errdefs.ErrInvalidArgument},
		"relative socket": {func(t *testing.T, n *node) {
			n.cfg.Address = "sharedcontent.sock"
		}, `daemon socket "sharedcontent.sock": an absolute path is required`, errdefs.ErrInvalidArgument},
	} {
		t.Run(name, func(t *testing.T) {
			n := newNode(t)
			tc.setup(t, n)
			before := n.files(t)
			_, err := Install(testCtx(t), n.cfg)
			require.ErrorContains(t, err, tc.want)
			require.ErrorIs(t, err, tc.class)
			require.Equal(t, before, n.files(t), "nothing written")
			require.Empty(t, n.takeCalls(t), "no service touched")
		})
	}
}

// TestInstallImports: containerd reads the drop-in through a relative
// import, an exact path, or a file that the main config imports.
func TestInstallImports(t *testing.T) {
	for name, files := range map[string]map[string]string{
		"relative glob": {DefaultContainerdConfig: "version = 3\nimports = [\"conf.d/*.toml\"]\n"},
		"exact path":    {DefaultContainerdConfig: "version = 2\nimports = [\"" + DropInPath + "\"]\n"},
		"nested": {
			DefaultContainerdConfig:         "version = 3\nimports = [\"/etc/containerd/base/*.toml\"]\n",
			"/etc/containerd/base/cri.toml": "version = 3\nimports = [\"../conf.d/sharedcontent.toml\"]\n",
		},
	} {
		t.Run(name, func(t *testing.T) {
			n := newNode(t)
			for p, content := range files {
				n.write(t, p, content)
			}
			require.NoError(t, checkImports(n.root, DefaultContainerdConfig, DropInPath))
		})
	}
}

// TestInstallNotReady: when the host daemon does not serve, Install
// fails naming the unit, and containerd is neither given the drop-in nor
// restarted: it keeps its own store.
func TestInstallNotReady(t *testing.T) {
	n := newNode(t)
	n.cfg.ReadyTimeout = time.Second
	_, err := Install(testCtx(t), n.cfg)
	require.ErrorIs(t, err, errdefs.ErrUnavailable)
	require.ErrorContains(t, err, "journalctl -u "+Unit)
	require.False(t, n.exists(DropInPath))
	require.Equal(t, unitCalls, n.takeCalls(t))
}

// TestUninstall: the drop-in goes first and containerd restarts on its own
// store, then the unit is stopped and disabled and every file Install
// wrote removed; the daemon's state directory and the shared root stay.
func TestUninstall(t *testing.T) {
	n := installedNode(t)
	n.write(t, "/var/lib/sharedcontent/node/journal.db", "journal")
	n.write(t, "/mnt/shared/containerd-content/blobs/sha256/aa", "blob")

	require.NoError(t, Uninstall(testCtx(t), n.cfg))
	require.Equal(t, []string{"restart containerd.service", "stop " + Unit, "disable " + Unit, "daemon-reload"}, n.takeCalls(t))
	for _, p := range []string{DropInPath, BinaryPath, EnvPath, UnitPath, "/etc/sharedcontent/auth-token"} {
		require.False(t, n.exists(p), p)
	}
	require.Equal(t, "journal", n.read(t, "/var/lib/sharedcontent/node/journal.db"))
	require.Equal(t, "blob", n.read(t, "/mnt/shared/containerd-content/blobs/sha256/aa"))

	// Again: nothing to undo, containerd is not restarted.
	require.NoError(t, Uninstall(testCtx(t), n.cfg))
	require.Equal(t, []string{"daemon-reload"}, n.takeCalls(t))
}

// leftovers are the installer's temporary files under the host root.
func leftovers(t *testing.T, n *node) []string {
	var out []string
	for _, p := range n.files(t) {
		if m, _ := filepath.Match(".*.tmp-*", filepath.Base(p)); m {
			out = append(out, p)
		}
	}
	return out
}

// TestSystemctlChroot: the command runs chrooted into the given root, a
// name without a slash found in that root's bin directories (here the
// test's own /, the only root with a shell).
func TestSystemctlChroot(t *testing.T) {
	log := filepath.Join(t.TempDir(), "calls")
	sc := systemctl{prefix: []string{"sh", "-c", `echo "$0 $*" >>` + log, "systemctl"}, root: "/"}
	require.NoError(t, sc.run(testCtx(t), "restart", Unit))
	b, err := os.ReadFile(log)
	require.NoError(t, err)
	require.Equal(t, "systemctl restart "+Unit+"\n", string(b))

	sc = systemctl{prefix: []string{"no-such-systemctl"}, root: t.TempDir()}
	err = sc.run(testCtx(t), "start", Unit)
	require.ErrorIs(t, err, errdefs.ErrNotFound)
	require.ErrorContains(t, err, "no-such-systemctl: not found in the host's")
}

// installedNode is a node whose daemon serves, installed once.
func installedNode(t *testing.T) *node {
	t.Helper()
	n := newNode(t)
	n.serve(t)
	_, err := Install(testCtx(t), n.cfg)
	require.NoError(t, err)
	n.takeCalls(t)
	return n
}
