package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sharedcontent/sharedcontent/contentv2"
	"github.com/sharedcontent/sharedcontent/internal/testutil/registry"
)

// The shared root's faults with real containerd (docs/design.md §8.19):
// each node sees the shared directory through a bind mount of its own.
// n1's mount is lazily unmounted while it runs, then its plugin is
// restarted on the unmounted path; the check is the user's: every blob
// each node's containerd lists reads back once the mount is back and the
// plugin restarted, and a re-pull works.

// rootReadyTimeout bounds how long a plugin takes to notice its root
// changed: a few of its probes (one per session interval, TTL/3).
const rootReadyTimeout = time.Minute

// readyz returns the status and body of the plugin's /readyz.
func readyz(addr string) (int, string, error) {
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get("http://" + addr + "/readyz")
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, strings.TrimSpace(string(b)), err
}

func waitReadyz(t *testing.T, n *node, addr string, want int) string {
	t.Helper()
	var body string
	waitFor(t, fmt.Sprintf("%s's /readyz answers %d", n.id, want), rootReadyTimeout, func() (bool, error) {
		if n.plugin.exited() {
			return false, dead(n.plugin)
		}
		code, b, err := readyz(addr)
		if err != nil {
			return false, err
		}
		body = b
		return code == want, fmt.Errorf("%d %s", code, b)
	})
	return body
}

func TestRootFaultsE2E(t *testing.T) {
	needSharedcontent(t)
	if os.Geteuid() != 0 {
		t.Skip("bind-mounts each node's root: run as root")
	}
	e := newEnv(t)
	reg, err := registry.Start()
	require.NoError(t, err)
	t.Cleanup(func() { reg.Close() })
	shared := e.path("shared")
	require.NoError(t, os.MkdirAll(shared, 0o755))
	ls := e.startLockServer("--session-ttl", faultSessionTTL.String(), "--lease-ttl", faultLeaseTTL.String())
	mount := func(args ...string) {
		out, err := exec.Command("mount", args...).CombinedOutput()
		require.NoError(t, err, "mount %v: %s", args, out)
	}
	var nodes []*node
	var metrics []string
	for i := range 2 {
		id := fmt.Sprintf("n%d", i+1)
		root := e.path(id + "-root")
		require.NoError(t, os.MkdirAll(root, 0o755))
		mount("--bind", shared, root)
		addr := freePort(t)
		metrics = append(metrics, addr)
		nodes = append(nodes, e.startSharedNode(id, root, ls.url(), "--metrics-listen", addr))
	}
	n1, n2 := nodes[0], nodes[1]
	imgA := pushImage(t, reg, "e2e/root-a", faultLayer)
	imgB := pushImage(t, reg, "e2e/root-b", faultLayer)
	for _, n := range nodes {
		require.NoError(t, n.pull(imgA.Ref, pullTimeout))
	}
	ls.waitSynced(t, []string{"n1", "n2"}, syncTimeout)
	waitReadyz(t, n1, metrics[0], http.StatusOK)

	// Vanished while running.
	out, err := exec.Command("umount", "-l", n1.shared).CombinedOutput()
	require.NoError(t, err, "umount -l: %s", out)
	body := waitReadyz(t, n1, metrics[0], http.StatusServiceUnavailable)
	require.Contains(t, body, "shared root "+n1.shared)
	require.Error(t, n1.pull(imgB.Ref, 20*time.Second), "a pull onto a vanished root")
	// n1 removes the image: its GC's deletes are refused, so the blobs stay
	// for n2 (and n1 keeps its references until it deletes again).
	t.Logf("n1 removes %s while its root is unmounted: %v", imgA.Ref, n1.removeImage(imgA.Ref))
	for _, d := range imgA.all() {
		require.True(t, sharedHas(shared, d), "blob %s of %s left the shared root", short(d), imgA.Ref)
	}
	ents, err := os.ReadDir(n1.shared)
	require.NoError(t, err)
	require.Empty(t, ents, "written onto n1's local directory under its unmounted root")
	requireListedReadable(t, []*node{n2})
	mount("--bind", shared, n1.shared)
	waitReadyz(t, n1, metrics[0], http.StatusOK)

	// Not mounted at start.
	n1.stop()
	out, err = exec.Command("umount", "-l", n1.shared).CombinedOutput()
	require.NoError(t, err, "umount -l: %s", out)
	p := e.start(n1.id+" plugin (unmounted)", n1.logName("plugin-unmounted.log"), nil, n1.pluginArgv()...)
	waitFor(t, "n1's plugin to refuse the unmounted root", startTimeout, func() (bool, error) { return p.exited(), nil })
	require.Error(t, p.err, "the plugin exits non-zero")
	b, err := os.ReadFile(p.logPath)
	require.NoError(t, err)
	require.Contains(t, string(b), "shared root "+n1.shared+" is not a mount point")
	ents, err = os.ReadDir(n1.shared)
	require.NoError(t, err)
	require.Empty(t, ents, "the refused plugin wrote onto n1's local directory")

	mount("--bind", shared, n1.shared)
	n1.startPlugin()
	n1.startContainerd(n1.config(true))
	waitReadyz(t, n1, metrics[0], http.StatusOK)
	reads := requireListedReadable(t, []*node{n1}) + requireListedReadable(t, []*node{n2})
	require.NoError(t, n1.pull(imgA.Ref, pullTimeout), "a re-pull")
	require.NoError(t, n1.pull(imgB.Ref, pullTimeout))
	reads += requireListedReadable(t, []*node{n1})

	// Read-only: unready, reads still served, writes refused.
	imgC := pushImage(t, reg, "e2e/root-c", faultLayer)
	require.NoError(t, remountReadOnly(n1.shared), "remount %s read-only", n1.shared)
	roBody := waitReadyz(t, n1, metrics[0], http.StatusServiceUnavailable)
	require.Contains(t, roBody, "shared root "+n1.shared)
	reads += requireListedReadable(t, []*node{n1})
	require.Error(t, n1.pull(imgC.Ref, 20*time.Second), "a pull onto a read-only root")
	mount("-o", "remount,bind,rw", n1.shared)
	waitReadyz(t, n1, metrics[0], http.StatusOK)

	// Swapped for another cluster's root: while running, then at start.
	other := e.path("other-cluster")
	require.NoError(t, os.MkdirAll(filepath.Join(other, contentv2.MetaDir), 0o755))
	cf, err := json.Marshal(contentv2.ClusterFile{ClusterID: "0123456789abcdef0123456789abcdef", CreatedAt: time.Now().UTC(), CreatedBy: "elsewhere"})
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(other, contentv2.MetaDir, "cluster.json"), cf, 0o644))
	mount("--bind", other, n1.shared) // over the cluster's: the path shows the other root
	swapBody := waitReadyz(t, n1, metrics[0], http.StatusServiceUnavailable)
	require.Contains(t, swapBody, "another root")
	require.Error(t, n1.pull(imgC.Ref, 20*time.Second), "a pull onto another cluster's root")
	n1.stop()
	p = e.start(n1.id+" plugin (another root)", n1.logName("plugin-swapped.log"), nil, n1.pluginArgv()...)
	waitFor(t, "n1's plugin to refuse another cluster's root", startTimeout, func() (bool, error) { return p.exited(), nil })
	require.Error(t, p.err, "the plugin exits non-zero")
	b, err = os.ReadFile(p.logPath)
	require.NoError(t, err)
	require.Contains(t, string(b), "is another root")
	ents, err = os.ReadDir(other)
	require.NoError(t, err)
	require.Len(t, ents, 1, "nothing written into the other cluster's root but its own .sharedcontent")
	out, err = exec.Command("umount", n1.shared).CombinedOutput() // the cluster's root shows again
	require.NoError(t, err, "umount: %s", out)
	n1.startPlugin()
	n1.startContainerd(n1.config(true))
	waitReadyz(t, n1, metrics[0], http.StatusOK)
	reads += requireListedReadable(t, []*node{n1}) + requireListedReadable(t, []*node{n2})
	require.NoError(t, n1.pull(imgC.Ref, pullTimeout), "a pull once the cluster's root is back")
	reads += requireListedReadable(t, []*node{n1})

	// A brand-new node (empty state dir) whose storage is not mounted: the
	// coordinator knows the cluster has a root, so the plugin exits,
	// having written nothing, and is no member; mounted, it joins.
	n3root := e.path("n3-root")
	require.NoError(t, os.MkdirAll(n3root, 0o755))
	n3 := e.newSharedNode("n3", n3root, ls.url())
	p = e.start(n3.id+" plugin (new, unmounted)", n3.logName("plugin-unmounted.log"), nil, n3.pluginArgv()...)
	waitFor(t, "n3's plugin to refuse the empty root", startTimeout, func() (bool, error) { return p.exited(), nil })
	require.Error(t, p.err, "the plugin exits non-zero")
	b, err = os.ReadFile(p.logPath)
	require.NoError(t, err)
	require.Contains(t, string(b), "is the shared filesystem mounted at "+n3root)
	ents, err = os.ReadDir(n3root)
	require.NoError(t, err)
	require.Empty(t, ents, "the refused new node wrote onto its local directory")
	mount("--bind", shared, n3root)
	n3.startPlugin()
	n3.startContainerd(n3.config(true))
	require.NoError(t, n3.pull(imgA.Ref, pullTimeout))
	ls.waitSynced(t, []string{"n1", "n2", "n3"}, syncTimeout)
	reads += requireListedReadable(t, []*node{n3}) + requireListedReadable(t, []*node{n1})
	report(t, "shared root faults: n1 unready after umount -l (%s), refused to start unmounted; read-only: unready, reads served, pulls refused; "+
		"another cluster's root: unready while running, refused at start, nothing written there; a new node on an unmounted root refused, nothing written; "+
		"%d listed blobs read back after each heal and restart", body, reads)
}
