package e2ek8s

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Sizes of the test workload's image: the pause binary and appLayers
// random layers.
const (
	nodeCount = 2
	appLayers = 2
	appLayer  = 8 << 20
	// podTimeout bounds how long pods take to be scheduled, pulled and
	// started on a loaded 2-core machine.
	podTimeout = 5 * time.Minute
)

const namespace = "sharedcontent"

// TestKubernetes is make e2e-k8s: one cluster, the scenarios in order,
// each starting from the state the previous one left.
func TestKubernetes(t *testing.T) {
	need(t)
	start := time.Now()
	c := newCluster(t)
	c.startRegistry()
	c.pushPause()
	tag1 := "e2e-k8s-1"
	scRef := c.pushSharedcontent(tag1)
	c.startControlPlane()
	c.startCoordinator()
	for i := 1; i <= nodeCount; i++ {
		c.addNode(i)
	}
	c.waitNodesReady()
	t.Logf("e2e-k8s: %d nodes Ready (%.1fs since start)", nodeCount, time.Since(start).Seconds())

	steps := []struct {
		name string
		f    func(t *testing.T)
	}{
		{"1-helm-install", func(t *testing.T) { c.helmInstall(t, scRef) }},
		{"2-deployment", c.deployment},
		{"3-reboot", c.rebootAll},
		{"4-upgrade", c.upgrade},
		{"5-uninstall", c.uninstall},
	}
	for _, s := range steps {
		if !t.Run(s.name, s.f) {
			t.Fatalf("e2e-k8s: %s failed; the later steps depend on it", s.name)
		}
	}
	t.Logf("e2e-k8s: total %.1fs", time.Since(start).Seconds())
	fmt.Println("\n=== e2e-k8s summary")
	for _, l := range summary {
		fmt.Println("  " + l)
	}
	fmt.Printf("  total %.1fs\n", time.Since(start).Seconds())
}

// waitNodesReady waits until every node is registered and Ready.
func (c *cluster) waitNodesReady() {
	waitFor(c.t, "every node Ready", podTimeout, func() (bool, error) {
		var list nodeList
		if err := c.api.get("/api/v1/nodes", &list); err != nil {
			return false, err
		}
		ready := 0
		for _, n := range list.Items {
			if n.ready() {
				ready++
			}
		}
		return ready == len(c.nodes), fmt.Errorf("%d of %d nodes Ready", ready, len(c.nodes))
	})
}

// helmInstall installs the chart: the node daemon from scRef on every
// node, the coordinator outside the cluster (coordinator.externalURL).
// In host mode (the chart's default) the DaemonSet's pod installs the
// daemon as a host service ordered before containerd and switches
// containerd to the shared store itself; in pod mode the test does the
// switch, as docs/kubernetes.md step 5 says (the drop-in and a restart).
// Either way every node's containerd then serves its content through the
// daemon.
func (c *cluster) helmInstall(t *testing.T, scRef string) {
	i := strings.LastIndex(scRef, ":")
	repo, tag := scRef[:i], scRef[i+1:]
	args := []string{"install", "sharedcontent", filepath.Join(repoRoot, "deploy", "helm", "sharedcontent"),
		"--namespace", namespace, "--create-namespace",
		"--set", "image.repository=" + repo, "--set", "image.tag=" + tag,
		"--set", "coordinator.enabled=false", "--set", "coordinator.externalURL=" + c.lockURL,
		"--set", "auth.tokenSecret=", "--set", "node.logLevel=debug"}
	c.hostMode = chartHasHostMode(t) && os.Getenv(envMode) != "pod"
	if os.Getenv(envMode) == "pod" {
		args = append(args, "--set", "node.mode=pod")
	}
	if !c.hostMode {
		// What the stock containerd pulls before the test switches it (the
		// sandbox, the daemon's own image) stays in the store the switch
		// leaves behind; host mode adopts it into the shared store.
		c.stale = append(c.stale, c.imageBlobs(t, c.pauseRef())...)
		c.stale = append(c.stale, c.imageBlobs(t, scRef)...)
		// The doctor reads the node's config before the daemon runs: on
		// stock containerd it fails (nothing to switch to yet).
		args = append(args, "--set", "node.doctor.enabled=false")
	}
	t0 := time.Now()
	out := c.helm(args...)
	t.Logf("helm install:\n%s", tail(out, 5))
	c.waitDaemonSetReady(t, "sharedcontent-node")
	installed := time.Since(t0)
	if !c.hostMode {
		drop, err := os.ReadFile(filepath.Join(repoRoot, "deploy", "containerd-config.toml"))
		require.NoError(t, err)
		for _, n := range c.nodes {
			n.write("/etc/containerd/conf.d/sharedcontent.toml", string(drop))
			_, err := n.exec(time.Minute, "systemctl", "restart", "containerd")
			require.NoError(t, err)
		}
	}
	for _, n := range c.nodes {
		// The pod is Ready once the host daemon serves, which is before
		// the installer switches containerd: wait for the switch.
		waitFor(t, n.name+"'s containerd on the shared store", 2*time.Minute, func() (bool, error) {
			out, err := n.ctr(30*time.Second, "plugins", "ls")
			return err == nil && strings.Contains(out, "sharedcontent-diff"), err
		})
		n.waitCRI(t)
		n.requireSwitched(t, true)
	}
	c.waitDaemonSetReady(t, "sharedcontent-node")
	for _, n := range c.nodes {
		n.requireBlobsReadable(t)
	}
	report(t, "1 helm install (%s mode): DaemonSet Ready on %d/%d nodes in %.1fs; containerd on the shared store on every node",
		map[bool]string{true: "host", false: "pod"}[c.hostMode], len(c.nodes), len(c.nodes), installed.Seconds())
}

// chartHasHostMode reports whether the chart installs the daemon as a
// host service (values.yaml has node.mode).
func chartHasHostMode(t *testing.T) bool {
	b, err := os.ReadFile(filepath.Join(repoRoot, "deploy", "helm", "sharedcontent", "values.yaml"))
	require.NoError(t, err)
	return strings.Contains(string(b), "\n  mode: host")
}

// requireSwitched checks whether containerd's content store is the
// daemon's (on) or its own (off), from `ctr plugins ls`.
func (n *node) requireSwitched(t *testing.T, on bool) {
	out, err := n.ctr(30*time.Second, "plugins", "ls")
	require.NoError(t, err)
	proxy := `(?m)^io\.containerd\.content\.v1\s+sharedcontent\s+.*\bok\s*$`
	if on {
		require.Regexp(t, proxy, out, "%s: containerd's content store is not the daemon's", n.name)
		return
	}
	require.NotRegexp(t, proxy, out, "%s: containerd still uses the daemon", n.name)
	require.Regexp(t, `(?m)^io\.containerd\.content\.v1\s+content\s+.*\bok\s*$`, out, "%s: containerd's own content store", n.name)
}

// waitDaemonSetReady waits until the DaemonSet has a Ready pod on every
// node.
func (c *cluster) waitDaemonSetReady(t *testing.T, name string) {
	waitFor(t, name+" Ready on every node", podTimeout, func() (bool, error) {
		var ds struct {
			Status struct {
				Desired int `json:"desiredNumberScheduled"`
				Ready   int `json:"numberReady"`
			} `json:"status"`
		}
		if err := c.api.get("/apis/apps/v1/namespaces/"+namespace+"/daemonsets/"+name, &ds); err != nil {
			return false, err
		}
		return ds.Status.Desired == len(c.nodes) && ds.Status.Ready == len(c.nodes),
			fmt.Errorf("%d of %d pods ready", ds.Status.Ready, ds.Status.Desired)
	})
}

// deployment runs scenario 2: a Deployment with one pod per node
// (required anti-affinity on the hostname) pulls one image through the
// daemon: each blob is downloaded once.
func (c *cluster) deployment(t *testing.T) {
	app := c.pushApp("e2e/app", "v1", appLayers, appLayer)
	c.app = app
	c.reg.ResetCounters()
	held := c.heldBlobs(app)
	t0 := time.Now()
	c.applyApp(t, "app", app.ref, len(c.nodes))
	c.waitAppReady(t, "app", len(c.nodes))
	elapsed := time.Since(t0)
	gets := c.requireSingleDownload(t, app, held)
	for _, n := range c.nodes {
		n.requireImage(t, app.ref)
		n.requireBlobsReadable(t)
	}
	for _, b := range app.blobs {
		_, err := os.Stat(filepath.Join(c.shared, "containerd-content", "blobs", "sha256", strings.TrimPrefix(b, "sha256:")))
		require.NoError(t, err, "blob %s not in the shared root", b)
	}
	report(t, "2 Deployment, 1 pod on each of %d nodes: Ready in %.1fs; %d GETs for %d blobs + manifest; every blob read back on every node",
		len(c.nodes), elapsed.Seconds(), gets, len(app.blobs))
}

// applyApp creates a Deployment of replicas pods, at most one per
// node, running ref.
func (c *cluster) applyApp(t *testing.T, name, ref string, replicas int) {
	labels := map[string]string{"app": name}
	deployment := map[string]any{
		"apiVersion": "apps/v1", "kind": "Deployment",
		"metadata": map[string]any{"name": name, "namespace": "default"},
		"spec": map[string]any{
			"replicas": replicas,
			"selector": map[string]any{"matchLabels": labels},
			"template": map[string]any{
				"metadata": map[string]any{"labels": labels},
				"spec": map[string]any{
					"terminationGracePeriodSeconds": 5,
					"affinity": map[string]any{"podAntiAffinity": map[string]any{
						"requiredDuringSchedulingIgnoredDuringExecution": []any{map[string]any{
							"labelSelector": map[string]any{"matchLabels": labels},
							"topologyKey":   "kubernetes.io/hostname",
						}},
					}},
					"containers": []any{map[string]any{"name": "app", "image": ref, "imagePullPolicy": "IfNotPresent"}},
				},
			},
		},
	}
	require.NoError(t, c.api.do(http.MethodPost, "/apis/apps/v1/namespaces/default/deployments", deployment, nil))
}

// waitAppReady waits until the Deployment's pods are Ready, one per node.
func (c *cluster) waitAppReady(t *testing.T, name string, want int) {
	waitFor(t, name+" Ready", podTimeout, func() (bool, error) {
		pods, err := c.api.pods("default", "app="+name)
		if err != nil {
			return false, err
		}
		nodes := map[string]bool{}
		for _, p := range pods.Items {
			if p.ready() {
				nodes[p.Spec.NodeName] = true
			}
		}
		return len(nodes) == want, fmt.Errorf("Ready on %d of %d nodes: %s", len(nodes), want, pods.describe())
	})
}

// heldBlobs returns which of img's blobs the shared root holds now.
func (c *cluster) heldBlobs(img image) map[string]bool {
	held := map[string]bool{}
	for _, b := range img.blobs {
		held[b] = c.sharedHas(b)
	}
	return held
}

// requireSingleDownload checks that the registry served each blob of img
// once, none the shared root held before (held: the pause binary's layer,
// which every test image shares with the sandbox image), and its
// manifest by digest at most once; it returns the GETs.
func (c *cluster) requireSingleDownload(t *testing.T, img image, held map[string]bool) int {
	gets := c.reg.BlobGets()
	total := gets[img.manifest]
	for _, b := range img.blobs {
		want := 1
		if held[b] {
			want = 0
		}
		assert.Equal(t, want, gets[b], "GETs of blob %s (held by the shared root before: %v)", b, held[b])
		total += gets[b]
	}
	assert.LessOrEqual(t, gets[img.manifest], 1, "GETs of the manifest by digest")
	return total
}

// waitCRI waits until the node's CRI answers.
func (n *node) waitCRI(t *testing.T) {
	waitFor(t, n.name+" CRI", 2*time.Minute, func() (bool, error) {
		_, err := n.crictl(20*time.Second, "images", "-q")
		return err == nil, err
	})
}

// requireImage checks that CRI lists ref on the node (what kubelet sees).
func (n *node) requireImage(t *testing.T, ref string) {
	out, err := n.crictl(30*time.Second, "images")
	require.NoError(t, err)
	repo, tag, _ := strings.Cut(ref[strings.LastIndex(ref, "/"):], ":")
	prefix := ref[:strings.LastIndex(ref, "/")] + repo
	found := false
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		found = found || (len(f) >= 2 && f[0] == prefix && f[1] == tag)
	}
	require.True(t, found, "%s: CRI does not list %s:\n%s", n.name, ref, out)
}

// listBlobs lists the digests the node's containerd records in k8s.io.
func (n *node) listBlobs(t *testing.T) []string {
	out, err := n.ctr(time.Minute, "content", "ls", "-q")
	require.NoError(t, err)
	return strings.Fields(out)
}

// requireBlobsReadable is the user's data-safety check: every blob the
// node's containerd lists reads back with its digest. In pod mode, where
// the test switches containerd by hand, blobs recorded in the other store
// before a switch (c.stale: the sandbox's and the daemon's own image,
// pulled by the stock containerd; n.stale: what the node recorded before
// the switch back) are exempt when they do not read back: containerd
// keeps their records while the store it reads changed. Host mode has no
// exemption: the installer adopts and restores them. It returns the
// number of blobs read.
func (n *node) requireBlobsReadable(t *testing.T) int {
	read, stale := 0, 0
	for _, d := range n.listBlobs(t) {
		out, err := n.ctr(time.Minute, "content", "get", d)
		if err != nil && (slices.Contains(n.stale, d) || slices.Contains(n.c.stale, d)) {
			stale++
			continue
		}
		require.NoError(t, err, "%s: content get %s", n.name, d)
		sum := sha256.Sum256([]byte(out))
		require.Equal(t, d, "sha256:"+hex.EncodeToString(sum[:]), "%s: content get %s", n.name, d)
		read++
	}
	t.Logf("%s: %d blobs read back (%d of the stock store, before the switch, not checked)", n.name, read, stale)
	return read
}

type nodeList struct {
	Items []nodeItem `json:"items"`
}

type nodeItem struct {
	Metadata struct {
		Name string `json:"name"`
	} `json:"metadata"`
	Status struct {
		Conditions []condition `json:"conditions"`
	} `json:"status"`
}

func (n nodeItem) ready() bool { return ready(n.Status.Conditions) }

type condition struct {
	Type   string `json:"type"`
	Status string `json:"status"`
}

func ready(cs []condition) bool {
	for _, c := range cs {
		if c.Type == "Ready" {
			return c.Status == "True"
		}
	}
	return false
}

type pod struct {
	Metadata struct {
		Name string `json:"name"`
		UID  string `json:"uid"`
	} `json:"metadata"`
	Spec struct {
		NodeName string `json:"nodeName"`
	} `json:"spec"`
	Status struct {
		Phase             string      `json:"phase"`
		Conditions        []condition `json:"conditions"`
		ContainerStatuses []struct {
			RestartCount int    `json:"restartCount"`
			ImageID      string `json:"imageID"`
			Image        string `json:"image"`
		} `json:"containerStatuses"`
	} `json:"status"`
}

func (p pod) ready() bool { return ready(p.Status.Conditions) }

type podList struct {
	Items []pod `json:"items"`
}

func (l podList) describe() string {
	var s []string
	for _, p := range l.Items {
		s = append(s, fmt.Sprintf("%s@%s %s ready=%v", p.Metadata.Name, p.Spec.NodeName, p.Status.Phase, p.ready()))
	}
	return strings.Join(s, ", ")
}

// report logs a step's summary line.
func report(t *testing.T, format string, args ...any) {
	t.Helper()
	line := fmt.Sprintf(format, args...)
	t.Log(line)
	summary = append(summary, line)
}

var summary []string
