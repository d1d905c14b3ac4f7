package e2ek8s

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Registry bandwidths: fast for most steps, slow while the upgrade's
// pull runs, so that it is still running while the pods are replaced.
const (
	fastBandwidth = 512 << 20
	slowBandwidth = 2 << 20
	// upgradeLayer is the size of each of the 2 layers pulled during the
	// upgrade: about 96 s at slowBandwidth.
	upgradeLayer = 96 << 20
)

// sharedHas reports whether the shared root holds blob d.
func (c *cluster) sharedHas(d string) bool {
	_, err := os.Stat(filepath.Join(c.shared, "containerd-content", "blobs", "sha256", strings.TrimPrefix(d, "sha256:")))
	return err == nil
}

// appPods returns the Deployment's pods by node.
func (c *cluster) appPods(t *testing.T, name string) map[string]pod {
	return c.podsByNode(t, "default", "app="+name)
}

// podsByNode returns the pods of ns matching selector, by node.
func (c *cluster) podsByNode(t *testing.T, ns, selector string) map[string]pod {
	pods, err := c.api.pods(ns, selector)
	require.NoError(t, err)
	out := map[string]pod{}
	for _, p := range pods.Items {
		out[p.Spec.NodeName] = p
	}
	return out
}

// waitRestarted waits until every pod of before (by node) is Ready with
// a higher restart count.
func (c *cluster) waitRestarted(t *testing.T, ns, selector string, before map[string]pod) {
	waitFor(t, selector+" restarted and Ready on every node", podTimeout, func() (bool, error) {
		now, err := c.api.pods(ns, selector)
		if err != nil {
			return false, err
		}
		done := 0
		for _, p := range now.Items {
			if b, ok := before[p.Spec.NodeName]; ok && p.Metadata.UID == b.Metadata.UID && restarts(p) > restarts(b) && p.ready() {
				done++
			}
		}
		return done == len(before), fmt.Errorf("%d of %d restarted and Ready: %s", done, len(before), now.describe())
	})
}

func restarts(p pod) int {
	n := 0
	for _, s := range p.Status.ContainerStatuses {
		n += s.RestartCount
	}
	return n
}

// rebootAll runs scenario 3: every node loses every process at once
// (its PID 1 killed: containerd, kubelet, the daemon, every pod) and
// boots again. Its init starts the enabled units, the daemon before
// containerd, then kubelet: every pod is Running again by itself on the
// same node, nothing the shared root holds is downloaded again, and CRI
// lists the images.
func (c *cluster) rebootAll(t *testing.T) {
	if !c.hostMode {
		t.Skip("pod mode: a node rebooting with the drop-in starts containerd before the daemon's pod, whose own image is read through the daemon (docs/design.md §6.1); needs the chart's host mode")
	}
	before := c.appPods(t, "app")
	dsBefore := c.podsByNode(t, namespace, "app.kubernetes.io/component=node")
	var held []string
	for d := range c.reg.BlobGets() {
		if c.sharedHas(d) {
			held = append(held, d)
		}
	}
	c.reg.ResetCounters()
	t0 := time.Now()
	for _, n := range c.nodes {
		n.powerOff()
	}
	down := time.Since(t0)
	for _, n := range c.nodes {
		n.boot()
	}
	// The API server still shows the pods Ready from before: wait until
	// kubelet has restarted every container (a higher restart count) and
	// it is Ready again.
	c.waitRestarted(t, namespace, "app.kubernetes.io/component=node", dsBefore)
	c.waitRestarted(t, "default", "app=app", before)
	back := time.Since(t0)
	c.waitNodesReady()
	after := c.appPods(t, "app")
	for node, p := range before {
		q, ok := after[node]
		require.True(t, ok, "no app pod on %s after the reboot", node)
		require.Equal(t, p.Metadata.UID, q.Metadata.UID, "%s: the pod was replaced, not restarted", node)
		require.Greater(t, restarts(q), restarts(p), "%s: the pod's container did not restart: the reboot did not reach it", node)
	}
	gets := c.reg.BlobGets()
	for _, d := range held {
		require.Zero(t, gets[d], "blob %s, held by the shared root, downloaded again after the reboot", d)
	}
	for d, n := range gets {
		require.LessOrEqual(t, n, 1, "blob %s downloaded %d times after the reboot", d, n)
	}
	reads := 0
	for _, n := range c.nodes {
		n.requireImage(t, c.app.ref)
		n.requireImage(t, c.pauseRef())
		n.requireSwitched(t, true)
		reads += n.requireBlobsReadable(t)
	}
	report(t, "3 reboot of all %d nodes (PID 1 killed, %.1fs to power off): every pod Running again by itself, same pods restarted, %.1fs after the power-off; 0 GETs of the %d blobs the shared root held; CRI lists the images; %d blobs read back",
		len(c.nodes), down.Seconds(), back.Seconds(), len(held), reads)
}

// dsPod returns the name and image of the DaemonSet's pod on node, if
// any (not being deleted).
func (c *cluster) dsPod(t *testing.T, node string) (name, image string, ready bool) {
	var pods struct {
		Items []struct {
			pod
			Metadata struct {
				Name     string  `json:"name"`
				Deleting *string `json:"deletionTimestamp"`
			} `json:"metadata"`
			Spec struct {
				NodeName   string `json:"nodeName"`
				Containers []struct {
					Image string `json:"image"`
				} `json:"containers"`
			} `json:"spec"`
		} `json:"items"`
	}
	require.NoError(t, c.api.get("/api/v1/namespaces/"+namespace+"/pods?labelSelector="+url.QueryEscape("app.kubernetes.io/component=node"), &pods))
	for _, p := range pods.Items {
		if p.Spec.NodeName == node && p.Metadata.Deleting == nil {
			return p.Metadata.Name, p.Spec.Containers[0].Image, p.ready()
		}
	}
	return "", "", false
}

// upgrade runs scenario 4: helm upgrade to a new image tag (OnDelete:
// nothing is replaced by itself), then the pods are deleted node by node
// while every node pulls a new image through the daemon: the new pods
// install the new daemon and restart it, the pulls succeed, each blob
// downloaded once, nothing lost.
func (c *cluster) upgrade(t *testing.T) {
	if !c.hostMode {
		t.Skip("pod mode: deleting the pod stops the daemon containerd pulls through; needs the chart's host mode")
	}
	tag2 := "e2e-k8s-2"
	ref2 := c.pushSharedcontent(tag2)
	// The image's binaries are the same bytes as tag1's (make image does
	// not stamp the tag into them): a new log level changes the daemon's
	// settings, so that each new pod restarts the host daemon.
	c.helm("upgrade", "sharedcontent", filepath.Join(repoRoot, "deploy", "helm", "sharedcontent"),
		"--namespace", namespace, "--reuse-values", "--set", "image.tag="+tag2, "--set", "node.logLevel=info")
	started := map[string]int{}
	for _, n := range c.nodes {
		started[n.name] = n.unitStarts(t, "containerd-sharedcontent.service")
	}
	for _, n := range c.nodes {
		_, img, _ := c.dsPod(t, n.name)
		require.NotEqual(t, ref2, img, "%s: OnDelete replaced the pod by itself", n.name)
	}
	app2 := c.pushApp("e2e/app2", "v1", 2, upgradeLayer)
	c.reg.SetBandwidth(slowBandwidth)
	defer c.reg.SetBandwidth(fastBandwidth)
	c.reg.ResetCounters()
	held := c.heldBlobs(app2)
	type result struct {
		node string
		err  error
		at   time.Time
	}
	results := make(chan result, len(c.nodes))
	t0 := time.Now()
	// A pull whose write stream the daemon's restart cuts fails ("failed
	// to send write: EOF": containerd does not retry it); kubelet pulls
	// again after a back-off (10 s, doubling), and so does this, every
	// 10 s, up to 6 times. The first failures are counted and reported.
	var firstFailures []string
	retries := 0
	var mu sync.Mutex
	for _, n := range c.nodes {
		go func() {
			_, err := n.crictl(15*time.Minute, "pull", app2.ref)
			if err != nil {
				mu.Lock()
				firstFailures = append(firstFailures, fmt.Sprintf("%s: %v", n.name, lastLine(err.Error())))
				mu.Unlock()
				// kubelet's image back-off starts at 10 s.
				for try := 0; err != nil && try < 6; try++ {
					time.Sleep(10 * time.Second)
					mu.Lock()
					retries++
					mu.Unlock()
					_, err = n.crictl(15*time.Minute, "pull", app2.ref)
				}
			}
			results <- result{n.name, err, time.Now()}
		}()
	}
	var replaced []time.Time
	for _, n := range c.nodes {
		old, _, _ := c.dsPod(t, n.name)
		require.NoError(t, c.api.do(http.MethodDelete, "/api/v1/namespaces/"+namespace+"/pods/"+old, nil, nil))
		waitFor(t, n.name+"'s old pod gone", podTimeout, func() (bool, error) {
			err := c.api.get("/api/v1/namespaces/"+namespace+"/pods/"+old, nil)
			return errors.Is(err, errNotFound), err
		})
		waitFor(t, n.name+"'s new pod Ready", podTimeout, func() (bool, error) {
			_, img, ready := c.dsPod(t, n.name)
			return img == ref2 && ready, fmt.Errorf("image %s, ready %v", img, ready)
		})
		replaced = append(replaced, time.Now())
		t.Logf("%s: pod replaced, %.1fs into the pull", n.name, time.Since(t0).Seconds())
	}
	var last time.Time
	for range c.nodes {
		r := <-results
		require.NoError(t, r.err, "%s: crictl pull during the upgrade", r.node)
		if r.at.After(last) {
			last = r.at
		}
		require.True(t, r.at.After(replaced[0]), "%s: the pull ended before the first pod was replaced: the upgrade did not happen under it", r.node)
	}
	gets := 0
	if len(firstFailures) == 0 {
		gets = c.requireSingleDownload(t, app2, held)
	} else {
		// A blob whose download a restart cut is downloaded again by a
		// retry: at most once per pull attempt.
		per := c.reg.BlobGets()
		for _, b := range app2.blobs {
			require.LessOrEqual(t, per[b], len(c.nodes)+retries, "GETs of %s", b)
			gets += per[b]
		}
	}
	reads := 0
	for _, n := range c.nodes {
		n.requireImage(t, app2.ref)
		n.requireSwitched(t, true)
		out, err := n.exec(30*time.Second, "systemctl", "is-active", "containerd-sharedcontent")
		require.NoError(t, err, out)
		require.Greater(t, n.unitStarts(t, "containerd-sharedcontent.service"), started[n.name], "%s: the new pod did not restart the host daemon", n.name)
		reads += n.requireBlobsReadable(t)
	}
	report(t, "4 helm upgrade to %s (OnDelete), pods deleted node by node under a %d MiB pull on every node: replaced at %s; pulls %d/%d ok, done %.1fs after start, first attempts failed: %d %v, retried %d times (every 10 s, as kubelet does); %d GETs for %d blobs; %d blobs read back",
		tag2, 2*upgradeLayer>>20, durations(t0, replaced), len(c.nodes), len(c.nodes), last.Sub(t0).Seconds(), len(firstFailures), firstFailures, retries, gets, len(app2.blobs), reads)
}

func durations(t0 time.Time, ts []time.Time) string {
	var s []string
	for _, t := range ts {
		s = append(s, fmt.Sprintf("%.1fs", t.Sub(t0).Seconds()))
	}
	return strings.Join(s, ", ")
}

// uninstall runs scenario 5: helm uninstall; containerd is back on its
// own store on every node and pulls on its own (each node downloads);
// the shared root keeps its blobs.
func (c *cluster) uninstall(t *testing.T) {
	if !c.hostMode {
		for _, n := range c.nodes {
			n.stale = n.listBlobs(t)
		}
	}
	c.helm("uninstall", "sharedcontent", "--namespace", namespace, "--wait", "--timeout", "5m")
	waitFor(t, "the DaemonSet's pods gone", podTimeout, func() (bool, error) {
		pods, err := c.api.pods(namespace, "")
		return err == nil && len(pods.Items) == 0, fmt.Errorf("pods left: %s %v", pods.describe(), err)
	})
	for _, n := range c.nodes {
		drop := filepath.Join(n.host("/etc/containerd"), "conf.d", "sharedcontent.toml")
		if !c.hostMode {
			require.NoError(t, os.Remove(drop))
			_, err := n.exec(time.Minute, "systemctl", "restart", "containerd")
			require.NoError(t, err)
		}
		waitFor(t, n.name+"'s drop-in removed", 2*time.Minute, func() (bool, error) {
			_, err := os.Stat(drop)
			return os.IsNotExist(err), err
		})
		n.waitCRI(t)
		waitFor(t, n.name+"'s containerd on its own store", 2*time.Minute, func() (bool, error) {
			out, err := n.ctr(30*time.Second, "plugins", "ls")
			return err == nil && !strings.Contains(out, "sharedcontent"), err
		})
		n.requireSwitched(t, false)
		if c.hostMode {
			out, _ := n.exec(30*time.Second, "systemctl", "is-active", "containerd-sharedcontent")
			require.NotEqual(t, "active", strings.TrimSpace(out), "%s: the host service still runs after helm uninstall", n.name)
		}
	}
	app3 := c.pushApp("e2e/app3", "v1", 1, 4<<20)
	c.reg.ResetCounters()
	// The pause binary's layer is in every node's own store already.
	held := c.heldBlobs(app3)
	reads := 0
	for _, n := range c.nodes {
		_, err := n.crictl(5*time.Minute, "pull", app3.ref)
		require.NoError(t, err)
		n.requireImage(t, app3.ref)
		reads += n.requireBlobsReadable(t)
	}
	gets := c.reg.BlobGets()
	for _, b := range app3.blobs {
		if !held[b] {
			require.Equal(t, len(c.nodes), gets[b], "GETs of %s: each node's own store downloads it", b)
		}
	}
	for _, b := range c.app.blobs {
		require.True(t, c.sharedHas(b), "helm uninstall removed blob %s from the shared root", b)
	}
	report(t, "5 helm uninstall: containerd back on its own store on %d/%d nodes; a pull on each downloads each blob once per node (%d GETs of each); the shared root keeps its blobs; %d blobs read back",
		len(c.nodes), len(c.nodes), len(c.nodes), reads)
}

// unitStarts counts how often the node's init has started unit since the
// test began (its log's "active" lines, across boots).
func (n *node) unitStarts(t *testing.T, unit string) int {
	b, err := os.ReadFile(filepath.Join(n.dir, "logs", "nodeinit.log"))
	require.NoError(t, err)
	return strings.Count(string(b), " "+unit+": active (pid ")
}
