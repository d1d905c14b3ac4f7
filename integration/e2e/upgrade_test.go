package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sharedcontent/sharedcontent/internal/testutil/registry"
)

// The commits of main the rolling upgrades start from (docs/operations.md
// "Versions and upgrades").
const (
	// upgradeFrom is the merge of sync by hash (9060547), the
	// first commit of main with both of its wire changes (one
	// event stream per node, cd00c6d before it; sync by hash). Its nodes
	// do not know the reference rule's refusal (409 no_session, 7d22b3e):
	// a coordinator that refused their references until their session
	// was renewed there failed a commit in the first seconds after its
	// restart. The coordinator now admits a recorded member's references
	// for a session TTL after its start (docs/design.md §10.7), so from
	// it the coordinator may go first too: both orders start here.
	upgradeFrom = "906054787e830c3042bd9323b0b3c61f434718eb"
	// envUpgradeFrom, a commit, starts both cases from it instead.
	envUpgradeFrom = "SHAREDCONTENT_E2E_UPGRADE_FROM"
)

const (
	// upgradePulls is how many images each node pulls in each phase of
	// an upgrade: before the first step, and during and after each step.
	upgradePulls = 1
	// upgradeLayer is the size of each load image's two layers.
	upgradeLayer = 2 << 20
	// upgradeBandwidth is the registry's uplink: a pull lasts long
	// enough that a step lands in it.
	upgradeBandwidth = 16 << 20
	// drainLayer is the layer the drain check's pull is downloading
	// when its daemon gets SIGTERM: a second at upgradeBandwidth.
	drainLayer = 16 << 20
	// drainWait bounds a draining daemon's exit: its --drain-timeout
	// (30 s) and the 10 s of its shutdown after it.
	drainWait = 45 * time.Second
)

// release is the daemons of an earlier commit of main.
type release struct{ commit, plugin, lockserver string }

// buildRelease builds the daemons of commit from `git archive` into
// <bin dir>/release-<commit>, once (later runs reuse them), without the
// race detector: they are not the code under test. The commit must be in
// this clone's history.
func buildRelease(t *testing.T, commit string) release {
	t.Helper()
	out, err := run(repoRoot, nil, "git", "rev-parse", "--verify", "--quiet", commit+"^{commit}")
	if err != nil {
		t.Fatalf("e2e: the rolling upgrade starts from commit %s of main, which this clone does not have (git rev-parse: %v): "+
			"run it in a clone with main's history (git fetch --unshallow)", commit, err)
	}
	commit = strings.TrimSpace(out)
	dir := filepath.Join(binDir, "release-"+commit[:12])
	r := release{commit: commit, plugin: filepath.Join(dir, "containerd-sharedcontent"),
		lockserver: filepath.Join(dir, "sharedcontent-lockserver")}
	if isFile(r.plugin) && isFile(r.lockserver) {
		return r
	}
	start := time.Now()
	tmp, err := os.MkdirTemp(binDir, "release-build-")
	require.NoError(t, err)
	defer func() { _ = os.RemoveAll(tmp) }()
	src := filepath.Join(tmp, "src")
	require.NoError(t, os.Mkdir(src, 0o755))
	out, err = run(repoRoot, nil, "sh", "-c", `git archive "$0" | tar -x -C "$1"`, commit, src)
	require.NoError(t, err, "git archive %s: %s", commit, out)
	out, err = run(src, []string{"GOFLAGS=-buildvcs=false", "GOWORK=off"}, "go", "build", "-trimpath",
		"-o", filepath.Join(tmp, "bin")+string(filepath.Separator), "./cmd/containerd-sharedcontent", "./cmd/sharedcontent-lockserver")
	require.NoError(t, err, "building the daemons of %s: %s", commit, tail(out, 30))
	// Another run may have built them meanwhile: theirs are as good.
	if err := os.Rename(filepath.Join(tmp, "bin"), dir); err != nil && !(isFile(r.plugin) && isFile(r.lockserver)) {
		t.Fatal(err)
	}
	t.Logf("e2e: built the daemons of %s (%.1fs)", commit[:12], time.Since(start).Seconds())
	return r
}

func isFile(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular()
}

// TestRollingUpgrade: a cluster of the daemons of an earlier
// commit (a coordinator and 3 nodes with real containerd) pulls under load
// while it is upgraded to this tree one daemon at a time, from
// upgradeFrom: the coordinator first, then the nodes one by one; and
// the nodes one by one, then the coordinator.
// Every node pulls upgradePulls new images in every phase (before the
// first step, and during and after each), so each step lands among pulls
// and each mixed cluster serves some. A node is restarted as an operator
// would a daemon of those commits, which does not drain: once its pull in
// flight is over. Asserts 0 failed pulls, each blob downloaded once, and
// every blob each node's containerd lists read back. After the first
// upgrade, a node of this tree gets SIGTERM in the middle of a download:
// it drains, and that pull succeeds.
func TestRollingUpgrade(t *testing.T) {
	alongside(t)
	needSharedcontent(t)
	coordinatorFirst, nodesFirst := upgradeFrom, upgradeFrom
	if c := os.Getenv(envUpgradeFrom); c != "" {
		coordinatorFirst, nodesFirst = c, c
	}
	t.Run("CoordinatorFirst", func(t *testing.T) { runRollingUpgrade(t, buildRelease(t, coordinatorFirst), true) })
	t.Run("NodesFirst", func(t *testing.T) { runRollingUpgrade(t, buildRelease(t, nodesFirst), false) })
}

func runRollingUpgrade(t *testing.T, old release, coordinatorFirst bool) {
	start := time.Now()
	e := newEnv(t)
	reg, err := registry.Start(registry.WithBandwidth(upgradeBandwidth))
	require.NoError(t, err)
	t.Cleanup(func() { reg.Close() })

	steps := []string{"n1", "n2", "n3"}
	if coordinatorFirst {
		steps = append([]string{"coordinator"}, steps...)
	} else {
		steps = append(steps, "coordinator")
	}
	var imgs []testImage
	for i := range (len(steps) + 1) * upgradePulls {
		imgs = append(imgs, pushImage(t, reg, fmt.Sprintf("e2e/upgrade%d", i), upgradeLayer, upgradeLayer))
	}
	var drainImg testImage
	if coordinatorFirst {
		drainImg = pushImage(t, reg, "e2e/upgrade-drain", drainLayer)
	}

	ls := &lockServer{e: e, addr: freePort(t), dataDir: e.path("lockserver"), bin: old.lockserver}
	require.NoError(t, os.MkdirAll(ls.dataDir, 0o700))
	ls.start()
	e.onCleanup(func() { ls.p.stop(stopGrace) })
	shared := e.path("shared")
	load := &upgradeLoad{t: t, imgs: imgs}
	for i := 1; i <= 3; i++ {
		nd := e.newSharedNode(fmt.Sprintf("n%d", i), shared, ls.url())
		nd.pluginBin, nd.oldFlags = old.plugin, true
		nd.startPlugin()
		nd.startContainerd(nd.config(true))
		load.add(nd)
	}
	load.start()
	defer load.stop()

	var done []string
	phase := func(step string, do func()) {
		t.Helper()
		t0 := time.Now()
		load.give(upgradePulls)
		if do != nil {
			do()
		}
		load.await(3 * pullTimeout)
		done = append(done, fmt.Sprintf("%s %.1fs", step, time.Since(t0).Seconds()))
	}
	phase("old", nil)
	for _, s := range steps {
		phase(s, func() {
			if s == "coordinator" {
				if ls.p.stop(stopGrace) {
					t.Errorf("the coordinator of %s did not stop within %v of SIGTERM", old.commit[:7], stopGrace)
				}
				ls.bin = ""
				ls.start()
				return
			}
			load.upgrade(s)
		})
	}
	drained := "not run"
	if coordinatorFirst {
		drained = load.drainCheck(reg, drainImg)
	}
	load.stop()

	require.Empty(t, load.failed(), "failed pulls")
	pulled := load.pulled()
	gets := 0
	for _, img := range imgs {
		require.Equal(t, 3, pulled[img.Ref], "nodes that pulled %s", img.Ref)
		gets += requireSingleDownload(t, reg, img)
	}
	if coordinatorFirst {
		gets += requireSingleDownload(t, reg, drainImg)
	}
	listed, reads := 0, 0
	for _, ln := range load.nodes {
		dgsts, err := ln.n.contentList()
		require.NoError(t, err)
		listed += len(dgsts)
		for _, d := range dgsts {
			got, _, err := ln.n.contentDigest(d)
			require.NoError(t, err, "%s lists %s", ln.n.id, short(d))
			require.Equal(t, d, got, "%s: content get %s", ln.n.id, short(d))
			reads++
		}
	}
	order := "coordinator first"
	if !coordinatorFirst {
		order = "nodes first"
	}
	report(t, "upgrade from %s, %s: phases [%s]; %d pulls of %d images, 0 failed; %d GETs (each blob once); %d blobs listed, %d/%d read back; drain of a node in mid-download: %s; %.1fs",
		old.commit[:7], order, strings.Join(done, ", "), 3*len(pulled), len(pulled), gets, listed, reads, listed, drained,
		time.Since(start).Seconds())
}

// upgradeLoad is the pulls of an upgrade: each node pulls imgs in order,
// one at a time, one per token given.
type upgradeLoad struct {
	t     *testing.T
	imgs  []testImage
	nodes []*loadNode
	wg    sync.WaitGroup
	once  sync.Once
	quit  chan struct{}
}

// loadNode is one node's pulls.
type loadNode struct {
	n      *node
	tokens chan struct{}
	// gate is held by each pull, and by the node's upgrade.
	gate sync.Mutex
	mu   sync.Mutex
	next int      // protected by mu: the index of the next image
	done int      // protected by mu: pulls finished
	want int      // protected by mu: pulls given
	errs []string // protected by mu
}

func (l *upgradeLoad) add(n *node) {
	l.nodes = append(l.nodes, &loadNode{n: n, tokens: make(chan struct{}, len(l.imgs))})
}

func (l *upgradeLoad) start() {
	l.quit = make(chan struct{})
	for _, ln := range l.nodes {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			for {
				select {
				case <-l.quit:
					return
				case <-ln.tokens:
				}
				ln.gate.Lock()
				ln.mu.Lock()
				img := l.imgs[ln.next]
				ln.next++
				ln.mu.Unlock()
				err := ln.n.pull(img.Ref, pullTimeout)
				ln.mu.Lock()
				ln.done++
				if err != nil {
					ln.errs = append(ln.errs, err.Error())
				}
				ln.mu.Unlock()
				ln.gate.Unlock()
			}
		}()
	}
}

func (l *upgradeLoad) stop() {
	l.once.Do(func() { close(l.quit); l.wg.Wait() })
}

// give lets every node start k more pulls.
func (l *upgradeLoad) give(k int) {
	for _, ln := range l.nodes {
		ln.mu.Lock()
		if ln.want+k > len(l.imgs) {
			l.t.Fatalf("e2e: %s would pull image %d of %d", ln.n.id, ln.want+k, len(l.imgs))
		}
		ln.want += k
		ln.mu.Unlock()
		for range k {
			ln.tokens <- struct{}{}
		}
	}
}

// await waits until every node has finished the pulls it was given.
func (l *upgradeLoad) await(timeout time.Duration) {
	waitFor(l.t, "the phase's pulls", timeout, func() (bool, error) {
		for _, ln := range l.nodes {
			ln.mu.Lock()
			ok := ln.done == ln.want
			ln.mu.Unlock()
			if !ok {
				return false, nil
			}
		}
		return true, nil
	})
}

func (l *upgradeLoad) node(id string) *loadNode {
	for _, ln := range l.nodes {
		if ln.n.id == id {
			return ln
		}
	}
	l.t.Fatalf("e2e: no node %s", id)
	return nil
}

// upgrade restarts node id's plugin on this tree's binary once its pull in
// flight is over (the old daemon does not drain), and lets it pull again
// once its containerd reaches the new plugin.
func (l *upgradeLoad) upgrade(id string) {
	ln := l.node(id)
	ln.gate.Lock()
	defer ln.gate.Unlock()
	if ln.n.plugin.stop(stopGrace) {
		l.t.Errorf("%s: the old plugin did not stop within %v of SIGTERM", id, stopGrace)
	}
	ln.n.pluginBin, ln.n.oldFlags, ln.n.drains = "", false, true
	ln.n.startPlugin()
	awaitContent(l.t, ln.n)
}

// drainCheck pulls img on n1 and sends its plugin SIGTERM while the
// registry is sending img's layer: the plugin drains, the pull succeeds,
// and the plugin exits cleanly; then it starts again and every node pulls
// img. It returns how long the drain took.
func (l *upgradeLoad) drainCheck(reg *registry.Registry, img testImage) string {
	t := l.t
	ln := l.node("n1")
	layer := img.Layers[0].Digest.String()
	result := make(chan error, 1)
	go func() { result <- ln.n.pull(img.Ref, pullTimeout) }()
	waitFor(t, "n1 downloading the drain check's layer", time.Minute, func() (bool, error) {
		return reg.BlobGets()[layer] > 0, nil
	})
	p := ln.n.plugin
	term := time.Now()
	p.signal(syscall.SIGTERM)
	require.NoError(t, <-result, "the pull in flight when its plugin got SIGTERM")
	pulled := time.Since(term)
	select {
	case <-p.done:
	case <-time.After(drainWait):
		p.kill()
		t.Fatalf("n1: the draining plugin did not exit within %v of SIGTERM", drainWait)
	}
	exited := time.Since(term)
	assert.NoError(t, p.err, "n1: the drained plugin's exit")
	b, err := os.ReadFile(p.logPath)
	require.NoError(t, err)
	require.Contains(t, string(b), `msg=drained`, "n1's plugin log")
	ln.gate.Lock()
	ln.n.startPlugin()
	awaitContent(t, ln.n)
	ln.gate.Unlock()
	for _, other := range l.nodes[1:] {
		require.NoError(t, other.n.pull(img.Ref, pullTimeout))
	}
	return fmt.Sprintf("pull done %.1fs after SIGTERM, plugin exited at %.1fs", pulled.Seconds(), exited.Seconds())
}

// pulled counts the nodes that pulled each image.
func (l *upgradeLoad) pulled() map[string]int {
	out := map[string]int{}
	for _, ln := range l.nodes {
		ln.mu.Lock()
		for _, img := range l.imgs[:ln.next] {
			out[img.Ref]++
		}
		ln.mu.Unlock()
	}
	return out
}

func (l *upgradeLoad) failed() []string {
	var out []string
	for _, ln := range l.nodes {
		ln.mu.Lock()
		out = append(out, ln.errs...)
		ln.mu.Unlock()
	}
	return out
}

// awaitContent waits until n's containerd answers through its plugin.
func awaitContent(t *testing.T, n *node) {
	t.Helper()
	p := n.plugin
	waitFor(t, n.id+" serving content through its plugin", startTimeout, func() (bool, error) {
		if p.exited() {
			return false, dead(p)
		}
		_, err := n.ctr(10*time.Second, "content", "ls", "-q")
		return err == nil, err
	})
}
