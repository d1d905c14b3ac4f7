package e2e

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sharedcontent/sharedcontent/internal/testutil/registry"
)

// GlusterFS: scenarios 1–4 with every node's --root on its own FUSE mount
// (its own glusterfs client process, with its own caches) of one GlusterFS
// volume, one brick on this machine. That is a real distributed filesystem
// between the nodes, though all of it runs on one host.

// glusterMountTimeout bounds a mount's becoming visible to the others.
const glusterMountTimeout = 30 * time.Second

// fuseSuperMagic is statfs(2)'s f_type of a FUSE filesystem.
const fuseSuperMagic = 0x65735546

// glusterMountOptions and glusterVolumeOptions turn off the caches that
// answer a lookup of a name another client has just removed for up to a
// second (the defaults, measured here): the kernel's FUSE entry and
// attribute caches (1 s) and GlusterFS's md-cache (stat-prefetch,
// md-cache-timeout 1 s). See requireNoStaleEntry and the README.
const glusterMountOptions = "entry-timeout=0,attribute-timeout=0"

var glusterVolumeOptions = [][2]string{{"performance.stat-prefetch", "off"}}

// glusterPkgs are the Debian packages that provide glusterBinaries.
var glusterPkgs = []string{"glusterfs-server", "glusterfs-client"}

// gluster holds the binaries once needGlusterFS has found (or installed)
// them.
var gluster struct {
	once sync.Once
	err  error  // set by once: installation failed
	skip string // set by once: the machine cannot run GlusterFS
	// glusterd is the management daemon, cli the gluster command.
	glusterd, cli string
}

// needGlusterFS skips t when this machine cannot mount GlusterFS through
// FUSE, installs the packages (apt-get) when they are missing, and fails t
// when that does not work.
func needGlusterFS(t *testing.T) {
	t.Helper()
	needSharedcontent(t)
	gluster.once.Do(findGlusterFS)
	if gluster.skip != "" {
		t.Skip(gluster.skip)
	}
	if gluster.err != nil {
		t.Fatalf("e2e: glusterfs: %v", gluster.err)
	}
}

// findGlusterFS fills gluster, installing the packages when missing. The
// install is here rather than in the Makefile so that it happens only
// when a GlusterFS test is selected and only after the checks that would
// skip it (root, /dev/fuse), and the same way under `go test`.
func findGlusterFS() {
	if _, err := os.Stat("/dev/fuse"); err != nil {
		gluster.skip = fmt.Sprintf("e2e: glusterfs skipped; FUSE mounts need /dev/fuse: %v", err)
		return
	}
	if b, err := os.ReadFile("/proc/filesystems"); err == nil && !bytes.Contains(b, []byte("\tfuse\n")) {
		gluster.skip = "e2e: glusterfs skipped; the kernel has no fuse filesystem (/proc/filesystems)"
		return
	}
	if lookGlusterFS() == nil {
		return
	}
	apt, err := exec.LookPath("apt-get")
	if err != nil {
		gluster.skip = fmt.Sprintf("e2e: glusterfs skipped; %v, and no apt-get to install %s", lookGlusterFS(), strings.Join(glusterPkgs, " "))
		return
	}
	t0 := time.Now()
	if out, err := run("/", nil, apt, "update", "-qq"); err != nil {
		gluster.err = fmt.Errorf("apt-get update: %v\n%s", err, tail(out, 20))
		return
	}
	args := append([]string{"install", "-y", "-qq"}, glusterPkgs...)
	if out, err := run("/", []string{"DEBIAN_FRONTEND=noninteractive"}, apt, args...); err != nil {
		gluster.err = fmt.Errorf("apt-get %s: %v\n%s", strings.Join(args, " "), err, tail(out, 20))
		return
	}
	if err := lookGlusterFS(); err != nil {
		gluster.err = fmt.Errorf("after installing %s: %w", strings.Join(glusterPkgs, " "), err)
		return
	}
	fmt.Printf("e2e: installed %s (%.1fs)\n", strings.Join(glusterPkgs, " "), time.Since(t0).Seconds())
}

// lookGlusterFS finds glusterd, gluster and mount.glusterfs (which mount(8)
// runs for -t glusterfs), also in the sbin directories.
func lookGlusterFS() error {
	var missing []string
	find := func(name string) string {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
		for _, dir := range []string{"/usr/sbin", "/sbin"} {
			if p := filepath.Join(dir, name); isExecutable(p) {
				return p
			}
		}
		missing = append(missing, name)
		return ""
	}
	gluster.glusterd = find("glusterd")
	gluster.cli = find("gluster")
	find("mount.glusterfs")
	if len(missing) > 0 {
		return fmt.Errorf("%s not found", strings.Join(missing, ", "))
	}
	return nil
}

func isExecutable(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0
}

// TestGlusterFS runs scenarios 1–3 and 4 with each node's root on its own
// GlusterFS mount.
func TestGlusterFS(t *testing.T) {
	needGlusterFS(t)
	ensureGlusterd(newEnv(t))
	t.Run("shared-content", func(t *testing.T) {
		c := newClusterOn(t, glusterRoots, "glusterfs: ", registry.WithBandwidth(concurrentBandwidth))
		requireOneIdentity(t, c)
		runSharedContent(t, c)
	})
	t.Run("holder-killed", func(t *testing.T) {
		c := newClusterOn(t, glusterRoots, "glusterfs: ", registry.WithBandwidth(bigBandwidth))
		requireOneIdentity(t, c)
		runHolderKilled(t, c)
	})
}

// requireOneIdentity checks, through every node's own mount, that the
// root's cluster.json (which the first node links into place from a file
// written aside) is the same file, that no file written aside is left, and
// that every node's marker is there.
func requireOneIdentity(t *testing.T, c *cluster) {
	t.Helper()
	_, want := rootClusterID(t, c.shared)
	for _, n := range c.nodes {
		_, got := rootClusterID(t, n.shared)
		require.Equal(t, string(want), string(got), "cluster.json through %s's mount %s", n.id, n.shared)
		meta, err := sharedFiles(n.shared, ".sharedcontent")
		require.NoError(t, err)
		for _, f := range meta {
			require.False(t, strings.HasSuffix(f, ".tmp"), "%s left in %s/.sharedcontent", f, n.shared)
		}
		markers, err := sharedFiles(n.shared, ".sharedcontent/nodes")
		require.NoError(t, err)
		require.Subset(t, markers, nodeIDs(c.nodes), "node markers through %s's mount", n.id)
	}
}

// ensureGlusterd uses the glusterd that runs, or starts one in the
// foreground (there is no init system to ask) that stops with e.
func ensureGlusterd(e *env) {
	t := e.t
	t.Helper()
	if out, err := exec.Command("pidof", "glusterd").Output(); err == nil && len(bytes.TrimSpace(out)) > 0 {
		t.Logf("e2e: using the running glusterd (pid %s)", bytes.TrimSpace(out))
		return
	}
	log := e.path("glusterd.log")
	e.addLog(log)
	p := e.start("glusterd", "glusterd.out", nil, gluster.glusterd, "--no-daemon", "--log-file="+log)
	e.onCleanup(func() { p.stop(stopGrace) })
	waitFor(t, "glusterd", startTimeout, func() (bool, error) {
		if p.exited() {
			return false, dead(p)
		}
		_, err := glusterCLI("pool", "list")
		return err == nil, err
	})
	t.Logf("e2e: started glusterd (%s)", gluster.glusterd)
}

// glusterCLI runs the gluster command without prompts.
func glusterCLI(args ...string) (string, error) {
	out, err := run("/", nil, gluster.cli, append([]string{"--mode=script"}, args...)...)
	if err != nil {
		return out, fmt.Errorf("gluster %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(out))
	}
	return out, nil
}

// glusterRoots is a rootProvider: a fresh volume of one brick under e's
// directory, mounted n times (one glusterfs FUSE client per node), each
// node's root its own mount. The test observes the directory through n1's
// mount. Cleanup unmounts them and stops and deletes the volume.
func glusterRoots(e *env, n int) ([]string, string) {
	t := e.t
	t.Helper()
	v := newGlusterVolume(e, []string{e.path("brick")})
	for i := 1; i <= n; i++ {
		v.mount(e.path(fmt.Sprintf("g%d", i)))
	}
	requireCrossVisible(t, v.mounts)
	requireNoStaleEntry(t, v.mounts)
	t.Logf("e2e: glusterfs volume %s (brick %s) mounted at %s", v.name, strings.Join(v.bricks, ", "), strings.Join(v.mounts, ", "))
	return v.mounts, v.mounts[0]
}

// glusterVolume is a GlusterFS volume of this machine's glusterd, with
// bricks under a test's directory, and its FUSE mounts.
type glusterVolume struct {
	e      *env
	name   string
	bricks []string // HOST:/path, in the volume's order
	paths  []string // the bricks' directories
	// mounts are its mount points, in the order mounted; a mount point
	// mounted again is listed once.
	mounts []string
}

// newGlusterVolume creates and starts a volume of the brick directories
// paths (created if missing): one brick, or a replica of as many as given
// (`force`: the bricks are on one host, and may be on the root
// filesystem), with the caches off (glusterVolumeOptions). Cleanup
// unmounts its mounts, stops and deletes it, and keeps the bricks' logs.
func newGlusterVolume(e *env, paths []string) *glusterVolume {
	t := e.t
	t.Helper()
	host, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	v := &glusterVolume{e: e, name: "sce2e-" + filepath.Base(e.dir), paths: paths} // e.dir is unique while it exists
	args := []string{"volume", "create", v.name}
	if len(paths) > 1 {
		args = append(args, "replica", fmt.Sprint(len(paths)))
	}
	for _, p := range paths {
		if err := os.MkdirAll(p, 0o755); err != nil {
			t.Fatal(err)
		}
		v.bricks = append(v.bricks, host+":"+p)
	}
	if _, err := glusterCLI(append(append(args, v.bricks...), "force")...); err != nil {
		t.Fatalf("e2e: %v", err)
	}
	e.onCleanup(v.remove)
	for _, kv := range glusterVolumeOptions {
		if _, err := glusterCLI("volume", "set", v.name, kv[0], kv[1]); err != nil {
			t.Fatalf("e2e: %v", err)
		}
	}
	if _, err := glusterCLI("volume", "start", v.name); err != nil {
		t.Fatalf("e2e: %v", err)
	}
	return v
}

// mount mounts the volume at mp (created if missing) through a FUSE client
// of its own (glusterMountOptions), logging to mp.log, and checks that it
// is a FUSE mount.
func (v *glusterVolume) mount(mp string) {
	t := v.e.t
	t.Helper()
	if err := v.tryMount(mp); err != nil {
		t.Fatalf("e2e: %v", err)
	}
}

// tryMount is mount, returning its error.
func (v *glusterVolume) tryMount(mp string) error {
	if err := os.MkdirAll(mp, 0o755); err != nil {
		return err
	}
	log := mp + ".log"
	v.e.addLog(log)
	if out, err := run("/", nil, "mount", "-t", "glusterfs", "-o", "log-file="+log+","+glusterMountOptions, "127.0.0.1:/"+v.name, mp); err != nil {
		return fmt.Errorf("mount -t glusterfs 127.0.0.1:/%s %s: %v: %s", v.name, mp, err, strings.TrimSpace(out))
	}
	if !slices.Contains(v.mounts, mp) {
		v.mounts = append(v.mounts, mp)
	}
	var st syscall.Statfs_t
	if err := syscall.Statfs(mp, &st); err != nil || st.Type != fuseSuperMagic {
		return fmt.Errorf("%s is not a FUSE mount after mount -t glusterfs (statfs type %#x, %v)", mp, st.Type, err)
	}
	return nil
}

// requireCrossVisible checks that a file written through the first mount
// reads back through every mount, and that its removal is seen by all.
func requireCrossVisible(t *testing.T, mounts []string) {
	t.Helper()
	probe := ".e2e-probe"
	want := []byte(fmt.Sprintf("written through %s at %s\n", mounts[0], time.Now().Format(time.RFC3339Nano)))
	if err := os.WriteFile(filepath.Join(mounts[0], probe), want, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, mp := range mounts {
		waitFor(t, "the probe file through "+mp, glusterMountTimeout, func() (bool, error) {
			got, err := os.ReadFile(filepath.Join(mp, probe))
			return bytes.Equal(got, want), err
		})
	}
	if err := os.Remove(filepath.Join(mounts[0], probe)); err != nil {
		t.Fatal(err)
	}
	for _, mp := range mounts {
		waitFor(t, "the probe file gone through "+mp, glusterMountTimeout, func() (bool, error) {
			_, err := os.Stat(filepath.Join(mp, probe))
			return errors.Is(err, fs.ErrNotExist), err
		})
	}
}

// requireNoStaleEntry checks that a blob another client has just moved away
// is gone at once, with no wait, through a client that looked it up just
// before. The store relies on that: a node that starts using a blob
// references it with the coordinator and then looks again, because a
// delete may have moved the blob into .trash between the two looks
// (contentv2 store.use). A client that answers the second look from its
// cache would use a blob that is gone.
func requireNoStaleEntry(t *testing.T, mounts []string) {
	t.Helper()
	dir := filepath.Join(mounts[0], ".e2e-stale")
	if err := os.MkdirAll(filepath.Join(dir, "trash"), 0o755); err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	blob := filepath.Join(dir, "blob")
	if err := os.WriteFile(blob, []byte("blob\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, mp := range mounts[1:] {
		waitFor(t, "the blob through "+mp, glusterMountTimeout, func() (bool, error) {
			_, err := os.Stat(filepath.Join(mp, ".e2e-stale", "blob"))
			return err == nil, err
		})
	}
	if err := os.Rename(blob, filepath.Join(dir, "trash", "blob")); err != nil {
		t.Fatal(err)
	}
	for _, mp := range mounts[1:] {
		_, err := os.Stat(filepath.Join(mp, ".e2e-stale", "blob"))
		require.ErrorIs(t, err, fs.ErrNotExist, "through %s, right after another client moved the blob away (stale cache; mount options %q, volume options %v)",
			mp, glusterMountOptions, glusterVolumeOptions)
		_, err = os.ReadFile(filepath.Join(mp, ".e2e-stale", "blob"))
		require.ErrorIs(t, err, fs.ErrNotExist, "read through %s, right after another client moved the blob away", mp)
	}
}

// remove unmounts the volume's mounts (those still mounted), stops and
// deletes it, and moves glusterd's logs of its bricks into e's directory.
func (v *glusterVolume) remove() {
	t := v.e.t
	mounted := mountsUnder(v.e.dir)
	for _, mp := range v.mounts {
		if !slices.Contains(mounted, mp) {
			continue
		}
		if err := syscall.Unmount(mp, 0); err != nil {
			t.Errorf("e2e: unmount %s: %v (detaching it)", mp, err)
			_ = syscall.Unmount(mp, syscall.MNT_DETACH)
		}
	}
	if _, err := glusterCLI("volume", "stop", v.name, "force"); err != nil {
		t.Errorf("e2e: %v", err)
	}
	if _, err := glusterCLI("volume", "delete", v.name); err != nil {
		t.Errorf("e2e: %v", err)
	}
	for _, brick := range v.paths {
		// glusterd names a brick's log after its path, / as -.
		brickLog := filepath.Join("/var/log/glusterfs/bricks", strings.ReplaceAll(strings.TrimPrefix(brick, "/"), "/", "-")+".log")
		keep := v.e.path(filepath.Base(brick) + ".log")
		if err := copyFile(brickLog, keep); err == nil {
			v.e.addLog(keep)
			_ = os.Remove(brickLog)
		}
	}
}
