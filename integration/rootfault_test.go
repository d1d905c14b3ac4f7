package integration

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containerd/containerd/v2/core/content"
	"github.com/containerd/errdefs"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"github.com/stretchr/testify/require"

	"github.com/sharedcontent/sharedcontent/contentv2"
	"github.com/sharedcontent/sharedcontent/contentv2/remote"
	"github.com/sharedcontent/sharedcontent/internal/testutil/registry"
	"github.com/sharedcontent/sharedcontent/lockclient"
	"github.com/sharedcontent/sharedcontent/lockserver/lockservertest"
)

// The shared root's faults (docs/design.md §8.19): each node sees the
// shared root through a bind mount of its own, which a test unmounts,
// remounts read-only or points at another cluster's root, as an NFS mount
// that failed at boot, a stale mount or a wrong volume would. The check is
// the user's: every blob a node's containerd metadata records reads back
// once the fault heals, and a pull works again.

// requireMounts skips the test unless this process may mount.
func requireMounts(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("the shared root's fault tests bind-mount the shared root onto each node's path: run them as root")
	}
}

func mountCmd(t *testing.T, args ...string) {
	t.Helper()
	out, err := exec.Command("mount", args...).CombinedOutput()
	require.NoError(t, err, "mount %v: %s", args, out)
}

// nodeMount is a node's own path to a shared root: a bind mount.
type nodeMount struct {
	t    *testing.T
	path string
}

// bindRoot bind-mounts src onto a new empty directory, unmounted when
// the test ends (before the directory is removed).
func bindRoot(t *testing.T, src string) *nodeMount {
	t.Helper()
	m := &nodeMount{t: t, path: filepath.Join(t.TempDir(), "root")}
	require.NoError(t, os.Mkdir(m.path, 0o755))
	m.mount(src)
	t.Cleanup(func() {
		for m.mounted() {
			if err := exec.Command("umount", "-l", m.path).Run(); err != nil {
				t.Errorf("unmounting %s: %v", m.path, err)
				return
			}
		}
	})
	return m
}

func (m *nodeMount) mount(src string) { mountCmd(m.t, "--bind", src, m.path) }

// unmount detaches the mount lazily (umount -l: a stale mount's fix, and
// what leaves a running process looking at the empty directory below).
func (m *nodeMount) unmount() {
	out, err := exec.Command("umount", "-l", m.path).CombinedOutput()
	require.NoError(m.t, err, "umount -l %s: %s", m.path, out)
}

// remount changes the mount's flags. A read-only remount fails with
// EBUSY ("mount point is busy") while a file is open for writing through
// the mount, as the node's own root probe and marker refresh keep one for
// a moment each interval; it is tried again, as an operator would, until
// it takes or a minute has passed.
func (m *nodeMount) remount(opt string) {
	m.t.Helper()
	args := []string{"-o", "remount,bind," + opt, m.path}
	deadline := time.Now().Add(time.Minute)
	for {
		out, err := exec.Command("mount", args...).CombinedOutput()
		if err == nil {
			return
		}
		if !strings.Contains(string(out), "busy") || time.Now().After(deadline) {
			require.NoError(m.t, err, "mount %v: %s", args, out)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (m *nodeMount) mounted() bool {
	b, err := os.ReadFile("/proc/self/mountinfo")
	require.NoError(m.t, err)
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) > 4 && f[4] == m.path {
			return true
		}
	}
	return false
}

// requireEmpty fails unless the directory under the (unmounted) path is
// still empty: nothing was written onto the node's local disk.
func (m *nodeMount) requireEmpty() {
	m.t.Helper()
	ents, err := os.ReadDir(m.path)
	require.NoError(m.t, err)
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	require.Empty(m.t, names, "written onto the node's local directory under its unmounted root %s", m.path)
}

// startNodeAt starts a node that sees the shared root at root.
func (e *faultEnv) startNodeAt(id, root string, opts ...contentv2.Option) (*faultNode, error) {
	n := &faultNode{id: id, root: root, stateDir: e.t.TempDir(), proxy: startProxy(e.t, e.coord.Addr()),
		opts: nodeOptions(opts...), env: e}
	e.t.Cleanup(n.Close)
	if err := n.Open(); err != nil {
		return n, err
	}
	e.nodes = append(e.nodes, n)
	return n, nil
}

// requireRootRefusal fails unless err is a refusal of the shared root at
// path that says what to do.
func requireRootRefusal(t *testing.T, err error, path string) {
	t.Helper()
	require.Error(t, err)
	require.ErrorIs(t, err, contentv2.ErrRootUnverified)
	require.ErrorContains(t, err, "shared root "+path)
	require.ErrorContains(t, err, "mount ")
}

// requireUnready waits for n to find its root unready for reason, and
// returns the refusal.
func requireUnready(t *testing.T, n *faultNode, reason string) error {
	t.Helper()
	require.Eventually(t, func() bool {
		return n.counter("sharedcontent_root_unready_total", "reason", reason) == 1
	}, 20*time.Second, 10*time.Millisecond, "node %s turns unready once its root is %s", n.id, reason)
	require.Equal(t, 0.0, n.counter("sharedcontent_root_ready"))
	err := n.Store.Ready()
	require.ErrorContains(t, err, "shared root "+n.root)
	require.True(t, errdefs.IsUnavailable(err), "%v", err)
	return err
}

func requireReadyAgain(t *testing.T, n *faultNode) {
	t.Helper()
	require.Eventually(t, func() bool { return n.Store.Ready() == nil }, 20*time.Second, 10*time.Millisecond,
		"node %s resumes by itself once its root is back", n.id)
	require.Equal(t, 1.0, n.counter("sharedcontent_root_ready"))
}

// requireRefusesWrites fails unless a write of a new blob and a delete of
// img's first blob on n are refused with the root's error.
func requireRefusesWrites(t *testing.T, ctx context.Context, n *faultNode, m *nodeMount, img registry.Image) {
	t.Helper()
	data := []byte("refused while the root is unready " + n.id)
	desc := ocispec.Descriptor{MediaType: ocispec.MediaTypeImageLayer, Digest: digest.FromBytes(data), Size: int64(len(data))}
	_, err := n.Store.Writer(ctx, content.WithRef("layer-"+desc.Digest.String()), content.WithDescriptor(desc))
	requireRootRefusal(t, err, m.path)
	require.True(t, errdefs.IsUnavailable(err), "a refused write is unavailable (containerd retries): %v", err)
	err = n.Store.Delete(ctx, digest.Digest(img.Blobs()[0]))
	requireRootRefusal(t, err, m.path)
	require.True(t, errdefs.IsUnavailable(err), "%v", err)
	_, err = n.Store.Reap(ctx)
	requireRootRefusal(t, err, m.path)
	// containerd retries a write answered unavailable until the pull's
	// deadline: the pull fails, having written nothing.
	require.Error(t, n.pullImage(2*time.Second, img), "a pull onto an unready root")
}

// TestRootNotMountedAtStart: a node whose journal says it joined the
// cluster starts on its root's path while the shared storage is not
// mounted there (an NFS mount that failed at boot). It refuses to start,
// naming the path and the fix, and writes nothing there; once the storage
// is mounted it starts, every blob reads back and pulls work.
//
// Before, the node started on the empty directory, claimed it (its
// cluster.json and marker on local disk), pulled onto local disk, and its
// reaper dropped every node's references to the blobs missing from its
// empty view.
func TestRootNotMountedAtStart(t *testing.T) {
	requireMounts(t)
	e := newFaultEnv(t, faultConfig())
	ctx := nsContext()
	imgA, imgB := e.push("a"), e.push("b")
	m1, m2 := bindRoot(t, e.root), bindRoot(t, e.root)
	n1, err := e.startNodeAt("node-1", m1.path)
	require.NoError(t, err)
	n2, err := e.startNodeAt("node-2", m2.path)
	require.NoError(t, err)
	require.NoError(t, n1.pullImage(time.Minute, imgA))
	require.NoError(t, n2.pullImage(time.Minute, imgA))
	e.coord.waitSynced(t, "node-1", "node-2")
	require.FileExists(t, filepath.Join(n1.stateDir, "sharedcontent", contentv2.RootRecordFile), "a member records its root")

	n1.Close()
	m1.unmount()
	err = n1.Open()
	requireRootRefusal(t, err, m1.path)
	require.ErrorContains(t, err, "is not a mount point")
	require.True(t, errdefs.IsFailedPrecondition(err), "%v", err)
	m1.requireEmpty()

	// Nor with only the journal (a node that joined before roots were
	// recorded): the root has no cluster.json.
	require.NoError(t, os.Remove(filepath.Join(n1.stateDir, "sharedcontent", contentv2.RootRecordFile)))
	err = n1.Open()
	requireRootRefusal(t, err, m1.path)
	require.ErrorContains(t, err, "has no .sharedcontent/cluster.json")
	m1.requireEmpty()
	e.requireRefs(t, ctx, imgA, "node-1", "node-2")

	m1.mount(e.root)
	require.NoError(t, n1.Open())
	requireReadable(t, ctx, n1, n2)
	require.NoError(t, n1.pullImage(time.Minute, imgA), "a re-pull")
	require.NoError(t, n1.pullImage(time.Minute, imgB))
	requireImage(t, ctx, n1.Node, imgB)
	e.requireRefs(t, ctx, imgA, "node-1", "node-2")
}

// TestRootVanishesWhileRunning: a node's root is unmounted under it
// (umount -l). Within its check interval the node turns unready: writes,
// deletes and its reaper are refused with an error naming the root and
// the fix, nothing is written onto the local directory, and no node's
// reference is dropped. Remounted, the node resumes by itself; every blob
// any node records reads back, before and after a restart, and pulls
// work.
//
// Before, nothing noticed: a pull wrote into a recreated local blobs/,
// and the node's reaper dropped references to the blobs it no longer saw.
func TestRootVanishesWhileRunning(t *testing.T) {
	requireMounts(t)
	e := newFaultEnv(t, faultConfig())
	ctx := nsContext()
	imgA, imgB, imgC := e.push("a"), e.push("b"), e.push("c")
	m1, m2 := bindRoot(t, e.root), bindRoot(t, e.root)
	n1, err := e.startNodeAt("node-1", m1.path)
	require.NoError(t, err)
	n2, err := e.startNodeAt("node-2", m2.path)
	require.NoError(t, err)
	require.NoError(t, n1.pullImage(time.Minute, imgA))
	require.NoError(t, n2.pullImage(time.Minute, imgA))
	require.NoError(t, n1.pullImage(time.Minute, imgB))
	e.coord.waitSynced(t, "node-1", "node-2")

	unmounted := time.Now()
	m1.unmount()
	rerr := requireUnready(t, n1, "not_mounted")
	t.Logf("node-1 unready %v after umount -l (probe every %v)", time.Since(unmounted).Round(time.Millisecond), faultSessionTTL/3)
	require.ErrorContains(t, rerr, "shared root "+m1.path)
	requireRefusesWrites(t, ctx, n1, m1, imgC)
	// Node 2's reaper, on a root that checks out, drops nothing either.
	_, err = n2.Store.Reap(ctx)
	require.NoError(t, err)
	m1.requireEmpty()
	e.requireRefs(t, ctx, imgA, "node-1", "node-2")
	e.requireRefs(t, ctx, imgB, "node-1")
	require.Zero(t, n1.counter("sharedcontent_reaper_reclaimed_total"))
	require.Zero(t, n2.counter("sharedcontent_reaper_reclaimed_total", "kind", "dangling"))

	m1.mount(e.root)
	requireReadyAgain(t, n1)
	requireReadable(t, ctx, n1, n2)
	require.NoError(t, n1.pullImage(time.Minute, imgC))
	n1.Close()
	require.NoError(t, n1.Open())
	requireReadable(t, ctx, n1, n2)
	require.NoError(t, n1.pullImage(time.Minute, imgA), "a re-pull")
	e.requireRefs(t, ctx, imgA, "node-1", "node-2")
}

// TestRootSwappedForAnotherClustersRoot: a node's root path comes to show
// another cluster's root, while it runs and then at its start. It turns
// unready (identity), then refuses to start; with its own root back it
// resumes, and nothing is lost.
func TestRootSwappedForAnotherClustersRoot(t *testing.T) {
	requireMounts(t)
	e := newFaultEnv(t, faultConfig())
	ctx := nsContext()
	imgA, imgB := e.push("a"), e.push("b")
	// Another cluster: its own coordinator and root, claimed by its node.
	other := newFaultEnv(t, faultConfig())
	o1, err := other.startNodeAt("node-1", other.root)
	require.NoError(t, err)
	o1.Close()

	m1 := bindRoot(t, e.root)
	n1, err := e.startNodeAt("node-1", m1.path)
	require.NoError(t, err)
	require.NoError(t, n1.pullImage(time.Minute, imgA))
	e.coord.waitSynced(t, "node-1")

	m1.mount(other.root) // over the cluster's: the path shows the other root at once
	requireUnready(t, n1, "identity")
	// imgB, which node-1 does not hold: a delete refused by the root still
	// drops the node's own reference (docs/design.md §8.19).
	requireRefusesWrites(t, ctx, n1, m1, imgB)
	e.requireRefs(t, ctx, imgA, "node-1")

	n1.Close()
	err = n1.Open()
	requireRootRefusal(t, err, m1.path)
	require.ErrorContains(t, err, "is another root")

	m1.unmount() // the cluster's root shows again
	require.NoError(t, n1.Open())
	requireReadable(t, ctx, n1)
	require.NoError(t, n1.pullImage(time.Minute, imgA))
}

// TestRootReadOnly: a node's root is remounted read-only. The node turns
// unready (read_only): writes and deletes are refused with an error that
// says so, blobs still read back; remounted read-write it resumes, and
// nothing is lost.
func TestRootReadOnly(t *testing.T) {
	requireMounts(t)
	e := newFaultEnv(t, faultConfig())
	ctx := nsContext()
	imgA, imgB := e.push("a"), e.push("b")
	m1 := bindRoot(t, e.root)
	n1, err := e.startNodeAt("node-1", m1.path)
	require.NoError(t, err)
	n2, err := e.startNodeAt("node-2", e.root)
	require.NoError(t, err)
	require.NoError(t, n1.pullImage(time.Minute, imgA))
	require.NoError(t, n2.pullImage(time.Minute, imgA))
	e.coord.waitSynced(t, "node-1", "node-2")

	m1.remount("ro")
	rerr := requireUnready(t, n1, "read_only")
	require.ErrorContains(t, rerr, "remount it read-write")
	requireRefusesWrites(t, ctx, n1, m1, imgB)
	requireReadable(t, ctx, n1, n2) // reads go on
	e.requireRefs(t, ctx, imgA, "node-1", "node-2")

	m1.remount("rw")
	requireReadyAgain(t, n1)
	require.NoError(t, n1.pullImage(time.Minute, imgB))
	requireReadable(t, ctx, n1, n2)
}

// TestNodeRefusedAtStartExits: a node whose token the coordinator refuses
// (it belongs to another node) refuses to start, says why and what to
// fix, and leaves nothing in the root, as a node pointed at another
// cluster does. Before, it started ("writes and deletes wait") and a
// daemon reported ready while every pull hung.
func TestNodeRefusedAtStartExits(t *testing.T) {
	coord := lockservertest.Start(t, lockservertest.WithConfig(faultConfig()),
		lockservertest.WithNodeTokens(map[string]string{"node-1": "token-1", "node-2": "token-2"}))
	root := t.TempDir()
	client, err := lockclient.New(coord.URL(), lockclient.WithNodeID("node-2"), lockclient.WithBearerToken("token-1"),
		lockclient.WithMaxRetries(1), lockclient.WithRetryInterval(10*time.Millisecond))
	require.NoError(t, err)
	t.Cleanup(func() { client.Close() })
	cs, err := contentv2.NewStore(root, "node-2", remote.New(client), append(nodeOptions(), contentv2.WithStateDir(t.TempDir()))...)
	if err == nil {
		cs.Close()
	}
	require.Error(t, err)
	require.True(t, errdefs.IsPermissionDenied(err), "%v", err)
	require.ErrorContains(t, err, "refusing to start")
	require.ErrorContains(t, err, "own credentials")
	ents, err := os.ReadDir(root)
	require.NoError(t, err)
	require.Empty(t, ents, "a refused node writes nothing into the root")

	// With its own token it starts.
	own, err := lockclient.New(coord.URL(), lockclient.WithNodeID("node-2"), lockclient.WithBearerToken("token-2"))
	require.NoError(t, err)
	t.Cleanup(func() { own.Close() })
	cs, err = contentv2.NewStore(root, "node-2", remote.New(own), append(nodeOptions(), contentv2.WithStateDir(t.TempDir()))...)
	require.NoError(t, err)
	require.NoError(t, cs.Close())
	require.False(t, errors.Is(err, contentv2.ErrRootUnverified))
}
