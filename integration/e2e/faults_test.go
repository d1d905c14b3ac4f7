package e2e

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sharedcontent/sharedcontent/internal/testutil/registry"
	"github.com/sharedcontent/sharedcontent/lockserver/api"
)

// The fault scenarios of docs/design.md §8 (its table in §8.14): the coordinator loses its
// database, a node is cut off from it, a second coordinator on the same
// root, a node gone for good. Throughout, every node's image must stay
// readable: every blob is read back with `ctr content get`.

const (
	// faultSessionTTL is the coordinator's --session-ttl in these
	// scenarios: a cut-off node waits about this long before it uses a
	// blob unregistered.
	faultSessionTTL = 3 * time.Second
	// faultLeaseTTL is their --lease-ttl: shorter than the fail-open
	// delay at faultSessionTTL (6.3 s), which the coordinator requires.
	faultLeaseTTL = 3 * time.Second
	// syncTimeout bounds a node's re-sync once it can reach the
	// coordinator again: a few keepalive periods and retry back-offs, and
	// the journal upload.
	syncTimeout = time.Minute
	// faultLayer is the layer size of the small images of these scenarios.
	faultLayer = 4 << 20
	// reapInterval and reapGrace are the plugins' reaper flags in
	// scenario 10 (the grace also the coordinator's).
	reapInterval = 2 * time.Second
	reapGrace    = time.Second
	// reclaimTimeout bounds the reaper's reclaiming a forgotten node's
	// blobs and ingests: a few passes, and the lease TTL of a pull lock
	// the node held when it died.
	reclaimTimeout = leaseTTL + time.Minute
)

// faultOpts shape a fault scenario's cluster.
type faultOpts struct {
	regOpts []registry.Option
	// lockServerArgs are added to the coordinator's flags.
	lockServerArgs []string
	// coordinator starts the coordinator (nil: a stand-alone one with
	// lockServerArgs) and returns the one that serves.
	coordinator func(e *env) *lockServer
	// lockURL returns node i's (0-based) --coordinator; nil: the lock
	// server's own URL.
	lockURL func(ls *lockServer, i int) string
	// pluginArgs returns node i's extra plugin flags.
	pluginArgs func(i int) []string
	// storage, when set, prepares the storage and returns the shared root
	// and node i's --root (nil: both the directory shared/).
	storage func(e *env) (shared string, root func(i int) string)
	// nodes is how many nodes to start (0: 3).
	nodes int
}

// newFaultCluster starts a registry, a coordinator and 3 nodes (o.nodes)
// as newCluster does, shaped by o.
func newFaultCluster(t *testing.T, o faultOpts) *cluster {
	t.Helper()
	needSharedcontent(t)
	e := newEnv(t)
	reg, err := registry.Start(o.regOpts...)
	require.NoError(t, err)
	t.Cleanup(func() { reg.Close() })
	c := &cluster{e: e, reg: reg, shared: e.path("shared")}
	root := func(int) string { return c.shared }
	if o.storage != nil {
		c.shared, root = o.storage(e)
	}
	if o.coordinator != nil {
		c.ls = o.coordinator(e)
	} else {
		c.ls = e.startLockServer(o.lockServerArgs...)
	}
	for i := range cmp.Or(o.nodes, 3) {
		u := c.ls.url()
		if o.lockURL != nil {
			u = o.lockURL(c.ls, i)
		}
		var args []string
		if o.pluginArgs != nil {
			args = o.pluginArgs(i)
		}
		c.nodes = append(c.nodes, e.startSharedNode(fmt.Sprintf("n%d", i+1), root(i), u, args...))
	}
	return c
}

// members returns the coordinator's members (GET /nodes) by node ID.
func (l *lockServer) members() (map[string]api.NodeStatus, error) {
	var r api.NodesResponse
	if err := l.get("/nodes", &r); err != nil {
		return nil, err
	}
	out := map[string]api.NodeStatus{}
	for _, n := range r.Nodes {
		out[n.NodeID] = n
	}
	return out, nil
}

// cluster returns the coordinator's identity (GET /cluster).
func (l *lockServer) cluster() (api.Cluster, error) {
	var c api.Cluster
	err := l.get("/cluster", &c)
	return c, err
}

// waitSynced waits until the coordinator's members are exactly ids, each
// live and synced, and returns how long that took.
func (l *lockServer) waitSynced(t *testing.T, ids []string, timeout time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	want := sorted(ids)
	waitFor(t, fmt.Sprintf("members %v live and synced (GET /nodes)", want), timeout, func() (bool, error) {
		if l.p.exited() {
			return false, dead(l.p)
		}
		m, err := l.members()
		if err != nil {
			return false, err
		}
		var got, unsynced []string
		for id, s := range m {
			got = append(got, id)
			if !s.Live || !s.Synced {
				unsynced = append(unsynced, fmt.Sprintf("%s(live=%v synced=%v)", id, s.Live, s.Synced))
			}
		}
		if !slices.Equal(want, sorted(got)) || len(unsynced) > 0 {
			return false, fmt.Errorf("members %v; not synced: %v", sorted(got), sorted(unsynced))
		}
		return true, nil
	})
	return time.Since(start)
}

// wipe stops the coordinator, removes its data directory, and starts it
// again on the same address: a coordinator whose disk was lost.
func (l *lockServer) wipe() {
	t := l.e.t
	t.Helper()
	if l.p.stop(stopGrace) {
		t.Errorf("coordinator did not stop within %v of SIGTERM", stopGrace)
	}
	require.NoError(t, os.RemoveAll(l.dataDir))
	require.NoError(t, os.MkdirAll(l.dataDir, 0o700))
	l.start()
}

// rootClusterID returns the cluster the shared root belongs to
// (<root>/.sharedcontent/cluster.json) and the file's bytes.
func rootClusterID(t *testing.T, shared string) (string, []byte) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(shared, ".sharedcontent", "cluster.json"))
	require.NoError(t, err, "the shared root's cluster.json")
	var v struct {
		ClusterID string `json:"cluster_id"`
	}
	require.NoError(t, json.Unmarshal(b, &v), "cluster.json: %s", b)
	require.NotEmpty(t, v.ClusterID, "cluster.json names no cluster_id: %s", b)
	return v.ClusterID, b
}

// ctl runs sharedcontentctl and returns its combined output.
func ctl(t *testing.T, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bins.ctl, args...)
	cmd.Env = hermeticEnv()
	out, err := cmd.CombinedOutput()
	t.Logf("e2e: sharedcontentctl %s: %v\n%s", strings.Join(args, " "), err, bytes.TrimSpace(out))
	return string(out), err
}

// sharedHas reports whether the shared blobs/ holds dgst.
func sharedHas(shared, dgst string) bool {
	_, err := os.Stat(filepath.Join(shared, "blobs", "sha256", strings.TrimPrefix(dgst, "sha256:")))
	return err == nil
}

// sharedCount returns how many of dgsts are in the shared blobs/.
func sharedCount(shared string, dgsts []string) int {
	n := 0
	for _, d := range dgsts {
		if sharedHas(shared, d) {
			n++
		}
	}
	return n
}

// requireGone checks that no blob of img is left in the shared blobs/.
func requireGone(t *testing.T, shared string, img testImage) {
	t.Helper()
	for _, d := range img.all() {
		require.False(t, sharedHas(shared, d), "%s is still in the shared blobs/", short(d))
	}
}

// requireNotReferencedBy checks that the coordinator does not list node as
// a reference of any blob of img.
func (c *cluster) requireNotReferencedBy(t *testing.T, img testImage, n *node) {
	t.Helper()
	for _, d := range img.all() {
		got, err := c.ls.refs(d)
		require.NoError(t, err)
		require.NotContains(t, got, n.id, "references of %s", short(d))
	}
}

// refsSummary describes the coordinator's references of img's blobs, for
// reports.
func (c *cluster) refsSummary(img testImage) string {
	seen := map[string]int{}
	for _, d := range img.all() {
		got, err := c.ls.refs(d)
		if err != nil {
			return err.Error()
		}
		seen[strings.Join(got, ",")]++
	}
	var out []string
	for k, n := range seen {
		if k == "" {
			k = "none"
		}
		out = append(out, fmt.Sprintf("%d× %s", n, k))
	}
	slices.Sort(out)
	return strings.Join(out, "; ")
}

// TestFaultCoordinatorWiped is scenario 7: the stand-alone coordinator
// loses its data directory and restarts on the same address. It is a
// foreign cluster to the nodes: no deletes until an operator adopts the
// root; then every node re-syncs and GC works again.
func TestFaultCoordinatorWiped(t *testing.T) {
	alongside(t)
	needCtl(t)
	c := newFaultCluster(t, faultOpts{lockServerArgs: []string{"--session-ttl", faultSessionTTL.String(), "--lease-ttl", faultLeaseTTL.String()}})
	n1, others := c.nodes[0], c.nodes[1:]
	img := pushImage(t, c.reg, "e2e/wiped", faultLayer, faultLayer)
	for _, r := range pullAll(c.nodes, img.Ref, pullTimeout) {
		require.NoError(t, r.err, "pull on %s", r.node.id)
	}
	solo := pushImage(t, c.reg, "e2e/wiped-solo", faultLayer)
	require.NoError(t, n1.pull(solo.Ref, pullTimeout))
	c.ls.waitSynced(t, nodeIDs(c.nodes), syncTimeout)
	c.requireRefs(t, img, c.nodes)
	c.requireRefs(t, solo, c.nodes[:1])
	rootID, rootJSON := rootClusterID(t, c.shared)
	cl, err := c.ls.cluster()
	require.NoError(t, err)
	require.Equal(t, rootID, cl.ClusterID, "the root's cluster.json names the coordinator's cluster")

	start := time.Now()
	c.ls.wipe()
	wipe := time.Since(start)
	foreign, err := c.ls.cluster()
	require.NoError(t, err)
	require.NotEqual(t, rootID, foreign.ClusterID, "a wiped coordinator starts a new cluster")

	// GC on n1 of an image every node uses, and of one only n1 uses: the
	// coordinator is foreign, so nothing is deleted.
	start = time.Now()
	require.NoError(t, n1.removeImage(img.Ref))
	require.NoError(t, n1.removeImage(solo.Ref))
	gcForeign := time.Since(start)
	c.requireSharedBlobs(t, img)
	c.requireSharedBlobs(t, solo)
	reads := requireReadable(t, img, others)
	id, b := rootClusterID(t, c.shared)
	require.Equal(t, rootID, id, "the root's cluster.json changed while the coordinator was foreign: %s", b)
	m, err := c.ls.members()
	require.NoError(t, err)
	t.Logf("foreign coordinator's members before adoption: %v", m)

	// The operator adopts the root.
	out, err := ctl(t, "--coordinator", c.ls.url(), "cluster", "adopt", "--root", c.shared)
	require.NoError(t, err, "sharedcontentctl cluster adopt: %s", out)
	adopted, err := c.ls.cluster()
	require.NoError(t, err)
	require.Equal(t, rootID, adopted.ClusterID, "the coordinator's cluster after adoption")
	_, b = rootClusterID(t, c.shared)
	require.Equal(t, string(rootJSON), string(b), "cluster.json after adoption")
	resync := c.ls.waitSynced(t, nodeIDs(c.nodes), syncTimeout)
	reads += requireReadable(t, img, others)
	refsImg, refsSolo := c.refsSummary(img), c.refsSummary(solo)
	for _, d := range img.all() {
		got, err := c.ls.refs(d)
		require.NoError(t, err)
		for _, n := range others {
			require.Contains(t, got, n.id, "references of %s after the re-sync", short(d))
		}
	}

	// GC works again: an image only n1 uses is deleted, the others' image
	// is not.
	fresh := pushImage(t, c.reg, "e2e/wiped-fresh", faultLayer)
	require.NoError(t, n1.pull(fresh.Ref, pullTimeout))
	c.requireRefs(t, fresh, c.nodes[:1])
	start = time.Now()
	require.NoError(t, n1.removeImage(fresh.Ref))
	gcAdopted := time.Since(start)
	requireGone(t, c.shared, fresh)
	c.requireSharedBlobs(t, img)
	reads += requireReadable(t, img, others)
	report(t, "7 coordinator wiped: restart with an empty data dir %.2fs, new cluster id; GC on n1 (%.2fs) deleted 0 of %d blobs (%d used by n2,n3, %d only by n1); adopt, all 3 nodes synced %.2fs later; references then: image %s, n1-only image %s; GC of a fresh n1-only image deleted %d/%d blobs (%.2fs); n2,n3 read back %d/%d blobs",
		wipe.Seconds(), gcForeign.Seconds(), len(img.all())+len(solo.all()), len(img.all()), len(solo.all()),
		resync.Seconds(), refsImg, refsSolo, len(fresh.all()), len(fresh.all()), gcAdopted.Seconds(), reads, reads)
}

// TestFaultNodeCutOff is scenario 8: n3 reaches the coordinator through a
// proxy that the test cuts. n3 pulls a new image while cut off (fail-open,
// once its session has surely expired); n1 pulls the same image and runs
// GC: nothing n3 uses is deleted. After n3 reconnects and re-syncs, the
// coordinator knows n3's references, and GC works again.
func TestFaultNodeCutOff(t *testing.T) {
	for _, mode := range []proxyMode{proxyDrop, proxyRefuse} {
		t.Run(mode.String(), func(t *testing.T) {
			alongside(t) // the two modes, each on its own cluster
			testNodeCutOff(t, mode)
		})
	}
}

func testNodeCutOff(t *testing.T, mode proxyMode) {
	var proxy *netProxy
	c := newFaultCluster(t, faultOpts{
		lockServerArgs: []string{"--session-ttl", faultSessionTTL.String(), "--lease-ttl", faultLeaseTTL.String()},
		lockURL: func(ls *lockServer, i int) string {
			if i != 2 {
				return ls.url()
			}
			proxy = startNetProxy(t, ls.addr)
			return proxy.url()
		},
	})
	n1, n2, n3 := c.nodes[0], c.nodes[1], c.nodes[2]
	img := pushImage(t, c.reg, "e2e/cutoff", faultLayer, faultLayer)
	for _, r := range pullAll(c.nodes, img.Ref, pullTimeout) {
		require.NoError(t, r.err, "pull on %s", r.node.id)
	}
	c.ls.waitSynced(t, nodeIDs(c.nodes), syncTimeout)
	c.requireRefs(t, img, c.nodes)
	require.Positive(t, proxy.connections(proxyUp), "n3 reaches the coordinator through the proxy")
	fresh := pushImage(t, c.reg, "e2e/cutoff-fresh", faultLayer, faultLayer)

	// n3 is cut off and pulls at once.
	proxy.set(mode)
	cut := time.Now()
	require.NoError(t, n3.pull(fresh.Ref, pullTimeout), "pull on n3 while cut off")
	cutPull := time.Since(cut)
	m, err := c.ls.members()
	require.NoError(t, err)
	require.Contains(t, m, n3.id, "members")
	require.False(t, m[n3.id].Synced, "n3 is synced in the coordinator's eyes although it used blobs unregistered: %+v", m[n3.id])
	c.requireNotReferencedBy(t, fresh, n3) // the cut is real
	c.requireSharedBlobs(t, fresh)

	// n1 pulls the same image (coordinated), then removes both images.
	require.NoError(t, n1.pull(fresh.Ref, pullTimeout))
	c.requireRefs(t, fresh, c.nodes[:1])
	start := time.Now()
	require.NoError(t, n1.removeImage(fresh.Ref))
	require.NoError(t, n1.removeImage(img.Ref))
	gc := time.Since(start)
	c.requireSharedBlobs(t, fresh)
	c.requireSharedBlobs(t, img)
	reads := requireReadable(t, fresh, []*node{n3})
	reads += requireReadable(t, img, []*node{n2, n3})
	attempts := proxy.connections(mode)

	// n3 reconnects and re-syncs: its uncoordinated pull is registered.
	proxy.set(proxyUp)
	resync := c.ls.waitSynced(t, nodeIDs(c.nodes), syncTimeout)
	c.requireRefs(t, fresh, []*node{n3})
	c.requireRefs(t, img, []*node{n2, n3})
	reads += requireReadable(t, fresh, []*node{n3})
	reads += requireReadable(t, img, []*node{n2, n3})

	// GC works again: n3's removal of the image only it uses deletes it.
	start = time.Now()
	require.NoError(t, n3.removeImage(fresh.Ref))
	gcAfter := time.Since(start)
	requireGone(t, c.shared, fresh)
	c.requireSharedBlobs(t, img)
	reads += requireReadable(t, img, []*node{n2, n3})
	report(t, "8 node cut off (%s): n3's pull while cut off took %.2fs (session TTL %v; %d connection attempts); n1 pulled it too, GC on n1 (%.2fs) kept all %d blobs; n3 synced %.2fs after reconnecting, references n3 / n2,n3; n3's GC then deleted %d/%d blobs (%.2fs); %d/%d blob reads ok",
		mode, cutPull.Seconds(), faultSessionTTL, attempts, gc.Seconds(), len(fresh.all())+len(img.all()), resync.Seconds(),
		len(fresh.all()), len(fresh.all()), gcAfter.Seconds(), reads, reads)
}

// TestFaultSecondCoordinator is scenario 9: a node with an embedded
// coordinator owns the shared root; a second node started with its own
// embedded coordinator on the same root must refuse to start, and so must
// a node pointed at another coordinator. The first node is unaffected.
func TestFaultSecondCoordinator(t *testing.T) {
	needSharedcontent(t)
	e := newEnv(t)
	reg, err := registry.Start()
	require.NoError(t, err)
	t.Cleanup(func() { reg.Close() })
	shared := e.path("shared")
	n1 := e.startSharedNode("n1", shared, "", "--data-dir", e.path("n1", "coordinator"))
	img := pushImage(t, reg, "e2e/second", faultLayer, faultLayer)
	require.NoError(t, n1.pull(img.Ref, pullTimeout))
	reads := requireReadable(t, img, []*node{n1})
	rootID, rootJSON := rootClusterID(t, shared)

	n2 := e.newSharedNode("n2", shared, "", "--data-dir", e.path("n2", "coordinator"))
	embedded := n2.requireRefusal(t)
	ls := e.startLockServer()
	n3 := e.newSharedNode("n3", shared, ls.url())
	remote := n3.requireRefusal(t)

	id, b := rootClusterID(t, shared)
	require.Equal(t, rootID, id)
	require.Equal(t, string(rootJSON), string(b), "cluster.json after the refusals")
	reads += requireReadable(t, img, []*node{n1})
	// n1's own GC still deletes: the refused nodes did not join its cluster.
	require.NoError(t, n1.removeImage(img.Ref))
	blobs, err := sharedFiles(shared, "blobs/sha256")
	require.NoError(t, err)
	require.Empty(t, blobs, "shared blobs/ after n1, the only node, removed the image")
	report(t, "9 second coordinator on one root: a second embedded coordinator exited in %.2fs (%s), a node pointed at another coordinator in %.2fs (%s); cluster.json unchanged; n1 read back %d/%d blobs, then its GC emptied blobs/",
		embedded.elapsed.Seconds(), embedded.exit, remote.elapsed.Seconds(), remote.exit, reads, reads)
}

// refusal is how a plugin refused to start.
type refusal struct {
	elapsed time.Duration
	exit    string // how the plugin exited
}

// requireRefusal starts the node's plugin and checks that it exits non-zero
// without serving, saying that the root belongs to another cluster.
func (n *node) requireRefusal(t *testing.T) refusal {
	t.Helper()
	start := time.Now()
	n.plugin = n.e.start(n.id+" plugin", n.logName("plugin.log"), nil, n.pluginArgv()...)
	p := n.plugin
	waitFor(t, n.id+"'s plugin to exit", startTimeout, func() (bool, error) {
		return p.exited(), nil
	})
	elapsed := time.Since(start)
	var exit *exec.ExitError
	require.ErrorAs(t, p.err, &exit, "%s's plugin on a root of another cluster: want a non-zero exit", n.id)
	if c, err := net.Dial("unix", n.pluginSock); err == nil {
		c.Close()
		t.Fatalf("%s's plugin socket accepts connections after the refusal", n.id)
	}
	b, err := os.ReadFile(p.logPath)
	require.NoError(t, err)
	var line string
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if strings.Contains(sc.Text(), "belongs to cluster") {
			line = strings.TrimSpace(sc.Text())
		}
	}
	require.NotEmpty(t, line, "%s's plugin log says nothing about the cluster the root belongs to:\n%s", n.id, tail(string(b), 20))
	t.Logf("%s refused: %s (%v)", n.id, line, p.err)
	return refusal{elapsed: elapsed, exit: p.err.Error()}
}

// reaperPasses counts the reaper passes the nodes' plugins ran, from their
// logs (the plugins log every pass they run at debug level).
func reaperPasses(nodes []*node) (int, error) {
	n := 0
	for _, nd := range nodes {
		b, err := os.ReadFile(nd.plugin.logPath)
		if err != nil {
			return 0, err
		}
		n += bytes.Count(b, []byte(`msg="reaper pass"`))
	}
	return n, nil
}

// TestFaultNodeForgotten is scenario 10: n3 dies for good in the middle of
// a pull. While it is a member, nothing it uses is reclaimed; once an
// operator forgets it, the reaper removes the blobs only it used and its
// ingest, and the other nodes' image stays readable.
func TestFaultNodeForgotten(t *testing.T) {
	alongside(t)
	needCtl(t)
	c := newFaultCluster(t, faultOpts{
		regOpts:        []registry.Option{registry.WithBandwidth(bigBandwidth)},
		lockServerArgs: []string{"--session-ttl", faultSessionTTL.String(), "--lease-ttl", faultLeaseTTL.String(), "--reap-grace", reapGrace.String()},
		pluginArgs: func(int) []string {
			return []string{"--reap-interval", reapInterval.String(), "--reap-grace", reapGrace.String()}
		},
	})
	n3, live := c.nodes[2], c.nodes[:2]
	img := pushImage(t, c.reg, "e2e/forgotten", faultLayer, faultLayer)
	for _, r := range pullAll(c.nodes, img.Ref, pullTimeout) {
		require.NoError(t, r.err, "pull on %s", r.node.id)
	}
	solo := pushImage(t, c.reg, "e2e/forgotten-solo", faultLayer, faultLayer)
	require.NoError(t, n3.pull(solo.Ref, pullTimeout))
	c.ls.waitSynced(t, nodeIDs(c.nodes), syncTimeout)
	c.requireRefs(t, solo, []*node{n3})

	// n3 dies while it downloads a large layer.
	big := pushImage(t, c.reg, "e2e/forgotten-big", bigLayerSize/4)
	layer := big.Layers[0].Digest.String()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pulling := pullAsync(ctx, n3, big.Ref, pullTimeout)
	waitFor(t, "n3 downloading the large layer", time.Minute, func() (bool, error) {
		st, err := c.ls.status("pull", layer)
		if err != nil {
			return false, err
		}
		return st.Holder != nil && st.Holder.NodeID == n3.id && c.reg.BlobBytes() >= bigLayerSize/16, nil
	})
	sent := c.reg.BlobBytes()
	n3.killPlugin()
	n3.containerd.stop(stopGrace)
	cancel()
	<-pulling
	gone := time.Now()
	ingests, err := ingestRefs(c.shared)
	require.NoError(t, err)
	var n3Ingest string
	for ref := range ingests {
		if strings.HasPrefix(ref, n3.id+"/") {
			n3Ingest = ref
		}
	}
	require.NotEmpty(t, n3Ingest, "n3's partial ingest in the shared dir; ingests: %v", ingests)
	// Whatever of the large image n3 committed before dying is its alone.
	onlyN3 := solo.all()
	for _, d := range big.all() {
		if sharedHas(c.shared, d) {
			onlyN3 = append(onlyN3, d)
		}
	}

	// While n3 is a member, the reaper reclaims nothing of it.
	waitFor(t, "n3's session expired (GET /nodes)", faultSessionTTL+10*time.Second, func() (bool, error) {
		m, err := c.ls.members()
		if err != nil {
			return false, err
		}
		s, ok := m[n3.id]
		if !ok {
			return false, fatalError{fmt.Errorf("n3 is no member: %v", m)}
		}
		return !s.Live && !s.Synced, fmt.Errorf("n3: %+v", s)
	})
	// Passes log when they end: of 3 more, at least 2 began after n3's
	// session had expired.
	before, err := reaperPasses(live)
	require.NoError(t, err)
	waitFor(t, "reaper passes with n3 away", reclaimTimeout, func() (bool, error) {
		p, err := reaperPasses(live)
		return p >= before+3, err
	})
	require.Equal(t, len(onlyN3), sharedCount(c.shared, onlyN3), "blobs only n3 uses, while n3 is a member")
	ingests, err = ingestRefs(c.shared)
	require.NoError(t, err)
	require.Contains(t, ingests, n3Ingest, "n3's ingest while n3 is a member")
	marker := filepath.Join(c.shared, ".sharedcontent", "nodes", n3.id)
	_, err = os.Stat(marker)
	require.NoError(t, err, "n3's node marker while n3 is a member")
	reads := requireReadable(t, img, live)
	away := time.Since(gone)

	// The operator forgets n3; the reaper reclaims what only it used.
	out, err := ctl(t, "--coordinator", c.ls.url(), "node", "forget", n3.id)
	require.NoError(t, err, "sharedcontentctl node forget: %s", out)
	forgot := time.Now()
	m, err := c.ls.members()
	require.NoError(t, err)
	require.NotContains(t, m, n3.id, "members after forget")
	waitFor(t, "n3's blobs, ingest and marker reclaimed", reclaimTimeout, func() (bool, error) {
		ing, err := ingestRefs(c.shared)
		if err != nil {
			return false, err
		}
		left := sharedCount(c.shared, onlyN3)
		_, ingestLeft := ing[n3Ingest]
		_, merr := os.Stat(marker)
		if left > 0 || ingestLeft || merr == nil {
			return false, fmt.Errorf("%d of %d blobs left, ingest left: %v, marker left: %v", left, len(onlyN3), ingestLeft, merr == nil)
		}
		return true, nil
	})
	reclaim := time.Since(forgot)
	c.requireSharedBlobs(t, img)
	reads += requireReadable(t, img, live)
	c.requireRefs(t, img, live)
	blobs, err := sharedFiles(c.shared, "blobs/sha256")
	require.NoError(t, err)
	assert.Len(t, blobs, len(img.all()), "shared blobs/ after the reaper: only the image n1, n2 use")
	report(t, "10 node forgotten: n3 killed mid-pull (%.1f MB of %.1f MB), away %.1fs: %d blobs only it used, its ingest and marker kept through 3 reaper passes; `node forget` → reaper reclaimed them in %.2fs (interval %v, grace %v); n1,n2 read back %d/%d blobs; blobs/ holds %d",
		mb(sent), mb(big.size()), away.Seconds(), len(onlyN3), reclaim.Seconds(), reapInterval, reapGrace,
		reads, reads, len(blobs))
}
