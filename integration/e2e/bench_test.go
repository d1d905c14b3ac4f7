package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sharedcontent/sharedcontent/internal/testutil/registry"
)

// envBench names the markdown file TestBenchContainerdPull writes its
// figures to; the benchmark runs only when it is set (`make
// bench-containerd`, which `make bench` calls).
const envBench = "SHAREDCONTENT_E2E_BENCH"

// benchSetup is one way to run a node in the pull benchmark.
type benchSetup struct {
	name string
	// start starts a fresh node under dir name id.
	start func(e *env, id string) *node
	// applies reports whether our daemon must apply every layer.
	applies bool
	// peer is the index of the stock setup this one is compared with:
	// the one of the same containerd version.
	peer int
	// builtin marks sharedcontent compiled into containerd: every blob
	// must be in its shared root, referenced by the node.
	builtin bool
}

// Indexes of benchSetups.
const (
	setupStock = iota
	setupBefore
	setupAfter
	setupStockBuiltinVersion
	setupBuiltin
)

var benchSetups = []benchSetup{
	{name: "stock containerd", start: func(e *env, id string) *node {
		return e.startStockNodes(id, 1, e.path(id, "content"))[0]
	}},
	{name: "sharedcontent, content proxy only (before)", start: func(e *env, id string) *node {
		nd := e.newSharedNode(id, e.path(id, "shared"), "", "--data-dir", e.path(id, "coordinator"))
		nd.noDiffer = true
		nd.startPlugin()
		nd.startContainerd(nd.config(true))
		return nd
	}},
	{name: "sharedcontent, content + diff proxy (after)", applies: true, start: func(e *env, id string) *node {
		return e.startSharedNode(id, e.path(id, "shared"), "", "--data-dir", e.path(id, "coordinator"))
	}},
	{name: "stock containerd, compiled-in version", peer: setupStockBuiltinVersion, start: func(e *env, id string) *node {
		nd := e.newNode("", id, e.path(id, "content"))
		nd.containerdBin = builtinBins.stock
		nd.startStock()
		return nd
	}},
	{name: "sharedcontent compiled into containerd (plugin/builtin)", peer: setupStockBuiltinVersion, builtin: true, start: func(e *env, id string) *node {
		return e.startBuiltinNode(id, e.path(id, "shared"), "")
	}},
}

// benchImage is one image shape of the benchmark.
type benchImage struct {
	layers   int
	layerMiB int64
	rounds   int
	// fetchRounds of `ctr content fetch` (no unpack), stock against
	// sharedcontent, show how much of the gap is the write path.
	fetchRounds int
	// clusterRounds of benchClusterNodes sharedcontent nodes pulling at
	// once against one node alone (the target, docs/design.md §5.6: within 1.3×), then as many
	// of `ctr content fetch` (no unpack), to show the share of the
	// unpacks, which every node does itself.
	clusterRounds int
}

var benchImages = []benchImage{
	{layers: 4, layerMiB: 64, rounds: 5, fetchRounds: 5, clusterRounds: 5}, // 256 MiB
	{layers: 4, layerMiB: 256, rounds: 3},                                  // 1 GiB
}

// benchClusterNodes is the number of nodes of the cluster rounds.
const benchClusterNodes = 3

// fetchSetups are the setups of the fetch-only rounds (indexes into
// benchSetups): the diff plugin plays no part in a fetch.
var fetchSetups = []int{setupStock, setupAfter, setupStockBuiltinVersion, setupBuiltin}

// TestBenchContainerdPull times `ctr images pull` (fetch + unpack, through
// the transfer service) on one node from a loopback registry: stock
// containerd against sharedcontent with and without its diff plugin. Each
// pull runs on a fresh node (its own containerd, plugin, embedded
// coordinator and directories, removed after the pull); the setups take
// turns, in a rotated order every round, and the median is reported. For
// the smaller image it also times `ctr content fetch` alone, stock against
// sharedcontent.
func TestBenchContainerdPull(t *testing.T) {
	out := os.Getenv(envBench)
	if out == "" {
		t.Skipf("benchmark: set %s=<report.md> (or run `make bench-containerd`)", envBench)
	}
	needSharedcontent(t)
	if raceBuild {
		t.Fatalf("benchmark: our daemons are race-built; set %s=0", envRace)
	}
	buildBuiltin(t)
	e := newEnv(t)
	reg, err := registry.Start()
	require.NoError(t, err)
	t.Cleanup(func() { reg.Close() })

	start := time.Now()
	load0 := loadAvg()
	var rows, clusterRows []string
	for _, bi := range benchImages {
		sizes := repeat(bi.layerMiB<<20, bi.layers)
		img := pushImage(t, reg, fmt.Sprintf("bench/%dx%d", bi.layers, bi.layerMiB), sizes...)
		all := []int{setupStock, setupBefore, setupAfter, setupStockBuiltinVersion, setupBuiltin}
		times := benchRounds(t, e, img, bi, "pull", all, bi.rounds)
		rows = append(rows, benchRows(t, bi, "pull", all, times)...)
		if bi.fetchRounds > 0 {
			times := benchRounds(t, e, img, bi, "fetch", fetchSetups, bi.fetchRounds)
			rows = append(rows, benchRows(t, bi, "content fetch only", fetchSetups, times)...)
		}
		if bi.clusterRounds > 0 {
			clusterRows = append(clusterRows, benchCluster(t, e, reg, img, bi, "pull")...)
			clusterRows = append(clusterRows, benchCluster(t, e, reg, img, bi, "fetch")...)
		}
	}
	require.NoError(t, writeBenchDoc(out, rows, clusterRows, time.Since(start), load0, loadAvg()))
	t.Logf("benchmark: wrote %s", out)
}

// benchRounds runs rounds of op ("pull" or "fetch") on the setups, which
// take turns in an order rotated each round, and returns the times per
// setup index.
func benchRounds(t *testing.T, e *env, img testImage, bi benchImage, op string, setups []int, rounds int) map[int][]time.Duration {
	t.Helper()
	times := map[int][]time.Duration{}
	for r := range rounds {
		for k := range setups {
			i := setups[(r+k)%len(setups)]
			d := benchPull(t, e, benchSetups[i], fmt.Sprintf("b%d-%s-%d-%d", bi.layerMiB, op, r, i), img, op == "fetch")
			times[i] = append(times[i], d)
			t.Logf("%d × %d MiB, %s round %d, %s: %.2fs", bi.layers, bi.layerMiB, op, r+1, benchSetups[i].name, d.Seconds())
		}
	}
	return times
}

// benchRows reports the medians of times against the setup's stock
// peer's: the ratio of the medians, and the median of the per-round
// ratios (each against the peer's pull of the same round).
func benchRows(t *testing.T, bi benchImage, what string, setups []int, times map[int][]time.Duration) []string {
	t.Helper()
	size := int64(bi.layers) * bi.layerMiB
	var rows []string
	for _, i := range setups {
		ts, peer := times[i], times[benchSetups[i].peer]
		stock := median(peer)
		var ratios []float64
		for r := range ts {
			ratios = append(ratios, ts[r].Seconds()/peer[r].Seconds())
		}
		m := median(ts)
		rows = append(rows, fmt.Sprintf("| %d MiB (%d × %d MiB) | %s | %s | %d | %.2f s | %.2f–%.2f s | **%.2f×** | %.2f× |",
			size, bi.layers, bi.layerMiB, what, benchSetups[i].name, len(ts), m.Seconds(),
			slices.Min(ts).Seconds(), slices.Max(ts).Seconds(), m.Seconds()/stock.Seconds(), medianFloat(ratios)))
		report(t, "bench %d MiB %s, %s: median %.2fs (%.2f× stock; per-round ratio median %.2f×)",
			size, what, benchSetups[i].name, m.Seconds(), m.Seconds()/stock.Seconds(), medianFloat(ratios))
	}
	return rows
}

// benchPull starts a fresh node of setup s and times one pull of img
// (with fetchOnly, `ctr content fetch`: no unpack). It checks the image is
// complete and unpacked (through our differ exactly when s says so), or
// for a fetch that every blob is in the node's content store, then stops
// the node and removes its directory (content included).
func benchPull(t *testing.T, e *env, s benchSetup, id string, img testImage, fetchOnly bool) time.Duration {
	t.Helper()
	nd := s.start(e, id)
	start := time.Now()
	if fetchOnly {
		_, err := nd.ctr(pullTimeout, "content", "fetch", "--plain-http", img.Ref)
		require.NoError(t, err, "%s: content fetch", s.name)
	} else {
		require.NoError(t, nd.pull(img.Ref, pullTimeout), "%s: pull", s.name)
	}
	d := time.Since(start)
	if fetchOnly {
		have, err := nd.contentList()
		require.NoError(t, err)
		for _, dg := range img.all() {
			require.Contains(t, have, dg, "%s: fetched blobs", s.name)
		}
	} else {
		requireReady(t, img, []*node{nd})
	}
	if s.builtin {
		requireBuiltinBlobs(t, nd, img)
	}
	if nd.plugin != nil && !fetchOnly {
		applied, err := nd.appliedByPlugin()
		require.NoError(t, err)
		want := 0
		if s.applies {
			want = len(img.Layers)
		}
		total := 0
		for _, n := range applied {
			total += n
		}
		require.Equal(t, want, total, "%s: layers applied by sharedcontent-diff", s.name)
	}
	nd.stop()
	dir := e.path(id)
	require.False(t, unmountUnder(t, dir), "mounts left under %s", dir)
	require.NoError(t, os.RemoveAll(dir))
	return d
}

// clusterSetup is one side of the cluster rounds: nodes fresh nodes
// pulling at once, sharedcontent nodes on one shared root or stock nodes
// each with its own content store (stock containerd cannot share one).
type clusterSetup struct {
	name  string
	nodes int
	stock bool
}

// clusterSetups take turns in the cluster rounds. The stock pair is the
// peer: what pulling on benchClusterNodes nodes at once costs stock
// containerd on this machine, every node downloading and unpacking.
var clusterSetups = []clusterSetup{
	{name: "sharedcontent, one node alone", nodes: 1},
	{name: fmt.Sprintf("sharedcontent, %d nodes at once", benchClusterNodes), nodes: benchClusterNodes},
	{name: "stock containerd, one node alone", nodes: 1, stock: true},
	{name: fmt.Sprintf("stock containerd, %d nodes at once", benchClusterNodes), nodes: benchClusterNodes, stock: true},
}

// clusterRound is what one round of a cluster setup measured.
type clusterRound struct {
	wall  time.Duration // from the start until the last node's pull ended
	cpu   time.Duration // the nodes' daemons' CPU time during it
	bytes float64       // registry bytes sent, per image size
}

// requireBuiltinBlobs checks that a compiled-in node's blobs went to its
// shared root through sharedcontent: every blob is there and its
// coordinator records the node's reference.
func requireBuiltinBlobs(t *testing.T, nd *node, img testImage) {
	t.Helper()
	for _, dg := range img.all() {
		hex := strings.TrimPrefix(dg, "sha256:")
		require.FileExists(t, filepath.Join(nd.shared, "blobs", "sha256", hex), "compiled-in node %s: blob in the shared root", nd.id)
		refs, err := nd.coordinator.refs(dg)
		require.NoError(t, err)
		require.Contains(t, refs, nd.id, "compiled-in node %s: its coordinator's references of %s", nd.id, dg)
	}
}

// benchCluster times op ("pull", or "fetch": `ctr content fetch`) of img
// in every cluster setup, taking turns in an order rotated each round,
// and reports the medians of wall time, daemons' CPU time and registry
// bytes, each cluster against one node alone of its kind.
func benchCluster(t *testing.T, e *env, reg *registry.Registry, img testImage, bi benchImage, op string) []string {
	t.Helper()
	fetchOnly := op == "fetch"
	rounds := make([][]clusterRound, len(clusterSetups))
	for r := range bi.clusterRounds {
		for k := range clusterSetups {
			i := (r + k) % len(clusterSetups)
			s := clusterSetups[i]
			reg.ResetCounters()
			cr := benchNodes(t, e, fmt.Sprintf("b%d-cluster-%s-%d-%d", bi.layerMiB, op, r, i), img, s, fetchOnly)
			cr.bytes = float64(reg.BlobBytes()) / float64(img.size())
			rounds[i] = append(rounds[i], cr)
			t.Logf("%d × %d MiB, cluster %s round %d, %s: %.2fs wall, daemons' CPU %.2fs, registry bytes %.2f× the image",
				bi.layers, bi.layerMiB, op, r+1, s.name, cr.wall.Seconds(), cr.cpu.Seconds(), cr.bytes)
		}
	}
	size := int64(bi.layers) * bi.layerMiB
	what := map[string]string{"pull": "pull", "fetch": "content fetch only"}[op]
	var rows []string
	for i, s := range clusterSetups {
		alone := rounds[i]
		if s.nodes > 1 {
			alone = rounds[i-1] // the one-node setup of the same kind
		}
		var walls, cpus []time.Duration
		var ratios, bytes []float64
		for r, cr := range rounds[i] {
			walls = append(walls, cr.wall)
			cpus = append(cpus, cr.cpu)
			bytes = append(bytes, cr.bytes)
			ratios = append(ratios, cr.wall.Seconds()/alone[r].wall.Seconds())
		}
		var aloneWalls []time.Duration
		for _, cr := range alone {
			aloneWalls = append(aloneWalls, cr.wall)
		}
		m, m1 := median(walls), median(aloneWalls)
		// On runtime.NumCPU() cores the nodes cannot end before their CPU
		// time is spent: the wall this CPU time alone implies, against
		// one node's.
		floor := median(cpus).Seconds() / float64(runtime.NumCPU()) / m1.Seconds()
		rows = append(rows, fmt.Sprintf("| %d MiB (%d × %d MiB) | %s | %s | %d | %.2f s | %.2f–%.2f s | **%.2f×** | %.2f× | %.2f s | %.2f× | %.2f–%.2f× |",
			size, bi.layers, bi.layerMiB, what, s.name, len(walls), m.Seconds(), slices.Min(walls).Seconds(), slices.Max(walls).Seconds(),
			m.Seconds()/m1.Seconds(), medianFloat(ratios), median(cpus).Seconds(), floor, slices.Min(bytes), slices.Max(bytes)))
		report(t, "bench %d MiB %s, %s: median wall %.2fs (%.2f× one node alone; per-round ratio median %.2f×); daemons' CPU %.2fs (CPU floor %.2f× one node's wall); registry bytes %.2f–%.2f× the image",
			size, what, s.name, m.Seconds(), m.Seconds()/m1.Seconds(), medianFloat(ratios), median(cpus).Seconds(), floor, slices.Min(bytes), slices.Max(bytes))
	}
	return rows
}

// benchNodes starts s.nodes fresh nodes, pulls img on all of them at once
// (with fetchOnly, `ctr content fetch`) and returns the wall time and the
// CPU time their daemons spent meanwhile. sharedcontent nodes share one
// root: the first embeds the coordinator and serves it to the others on
// loopback. It checks every node's image is complete and, for
// sharedcontent, unpacked through our differ (or, for a fetch, that every
// blob is in its content store), then stops the nodes and removes their
// directories.
func benchNodes(t *testing.T, e *env, id string, img testImage, s clusterSetup, fetchOnly bool) clusterRound {
	t.Helper()
	nodes := startBenchNodes(t, e, id, s)
	cpu0 := nodesCPU(nodes)
	start := time.Now()
	errs := make(chan error, len(nodes))
	for _, nd := range nodes {
		go func() {
			var err error
			if fetchOnly {
				_, err = nd.ctr(pullTimeout, "content", "fetch", "--plain-http", img.Ref)
			} else {
				err = nd.pull(img.Ref, pullTimeout)
			}
			if err != nil {
				err = fmt.Errorf("%s: %w", nd.id, err)
			}
			errs <- err
		}()
	}
	for range nodes {
		require.NoError(t, <-errs)
	}
	cr := clusterRound{wall: time.Since(start), cpu: nodesCPU(nodes) - cpu0}
	for _, nd := range nodes {
		if fetchOnly {
			have, err := nd.contentList()
			require.NoError(t, err)
			for _, dg := range img.all() {
				require.Contains(t, have, dg, "%s: fetched blobs", nd.id)
			}
			continue
		}
		requireReady(t, img, []*node{nd})
		if s.stock {
			continue
		}
		applied, err := nd.appliedByPlugin()
		require.NoError(t, err)
		total := 0
		for _, n := range applied {
			total += n
		}
		require.Equal(t, len(img.Layers), total, "%s: layers applied by sharedcontent-diff", nd.id)
	}
	dirs := []string{e.path(id)}
	for i := len(nodes) - 1; i >= 0; i-- { // the coordinator's node last
		nodes[i].stop()
		dirs = append(dirs, nodes[i].dir)
	}
	for _, dir := range dirs {
		require.False(t, unmountUnder(t, dir), "mounts left under %s", dir)
		require.NoError(t, os.RemoveAll(dir))
	}
	return cr
}

// startBenchNodes starts the nodes of one round of s under dir id.
func startBenchNodes(t *testing.T, e *env, id string, s clusterSetup) []*node {
	t.Helper()
	var nodes []*node
	if s.stock {
		for i := 1; i <= s.nodes; i++ {
			nodes = append(nodes, e.startStockNodes(fmt.Sprintf("%s-n%d", id, i), 1, e.path(id, fmt.Sprintf("content%d", i)))...)
		}
		return nodes
	}
	shared := e.path(id, "shared")
	addr := freePort(t)
	for i := 1; i <= s.nodes; i++ {
		if i == 1 {
			nodes = append(nodes, e.startSharedNode(fmt.Sprintf("%s-n%d", id, i), shared, "",
				"--data-dir", e.path(id, "coordinator"), "--coordinator-listen", addr))
		} else {
			nodes = append(nodes, e.startSharedNode(fmt.Sprintf("%s-n%d", id, i), shared, "http://"+addr))
		}
	}
	return nodes
}

// nodesCPU is the CPU time the nodes' daemons have used so far.
func nodesCPU(nodes []*node) time.Duration {
	var d time.Duration
	for _, nd := range nodes {
		d += nd.containerd.cpu()
		if nd.plugin != nil {
			d += nd.plugin.cpu()
		}
	}
	return d
}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func medianFloat(fs []float64) float64 {
	s := slices.Clone(fs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	return strings.Join(strings.Fields(string(b))[:3], " ")
}

// writeBenchDoc writes the benchmark's markdown report.
func writeBenchDoc(path string, rows, clusterRows []string, took time.Duration, load0, load1 string) error {
	containerdVersion, _ := run(repoRoot, nil, bins.containerd, "--version")
	var b strings.Builder
	fmt.Fprintf(&b, `# Pull with real containerd: stock against sharedcontent

Generated by `+"`make bench-containerd`"+` (also run by `+"`make bench`"+`): `+"`SHAREDCONTENT_E2E=1 SHAREDCONTENT_E2E_RACE=0 %s=docs/bench-containerd.md go test -run '^TestBenchContainerdPull$' ./integration/e2e/`"+`
(integration/e2e/bench_test.go). Do not edit by hand: rerun it. Needs root.

- **Date:** %s UTC; the run took %s
- **Machine:** %d cores, Go %s %s/%s; %s (the compiled-in pair: %s)
- **Load average** (1, 5, 15 min) at the start: %s; at the end: %s
- **What is timed:** `+"`ctr images pull --plain-http`"+` (the transfer service: fetch and unpack into overlayfs) of an image
  of one random file per layer (gzip with stored blocks), from an in-process registry on loopback, no bandwidth limit.
- **Nodes:** every pull runs on a fresh node started as `+"`make e2e`"+` starts them (daemons without the race detector),
  removed afterwards. Stock: containerd's built-in content store. Before: the sharedcontent daemon as content proxy only
  (containerd unpacks with its own walking differ, reading each layer through the proxy). After: content and diff proxy
  (deploy/containerd-config.toml: layers applied by the daemon, from the shared directory); each of its pulls is checked
  to have applied every layer through the daemon, and each "before" pull none.
- **Compiled in:** the control experiment for the proxy's cost. containerd built here at the containerd version of the
  main module, stock and with sharedcontent compiled in (`+"`plugin/builtin`"+`, integration/tools/builtin: the same
  store, coordinator and shared root, called in-process by containerd's metadata store, without the gRPC hop; containerd
  unpacks with its own differ, reading the shared root in-process), each node with its own coordinator
  (sharedcontent-lockserver). Each such pull is checked to have put every blob in the shared root with the node's
  reference recorded by the coordinator. These two compare with each other: "vs stock" is against the stock
  containerd of the same version.
- **Order:** the setups take turns, the order rotated each round. Median of the rounds; "vs stock" = median / stock
  median; "per round" = median over rounds of (this pull / the stock pull of the same round), less sensitive to load that
  drifts during the run. The machine may be shared: see the load average.
- **Content fetch only:** `+"`ctr content fetch --plain-http`"+` (no unpack), to show the share of the write path
  (content written through the proxy) in what is left; the diff plugin plays no part in it.

| image | what | setup | rounds | median | min–max | vs stock | per round |
| --- | --- | --- | --- | --- | --- | --- | --- |
`, envBench, time.Now().UTC().Format("2006-01-02 15:04"), took.Round(time.Second), runtime.NumCPU(), runtime.Version(),
		runtime.GOOS, runtime.GOARCH, strings.TrimSpace(containerdVersion), builtinBins.version, load0, load1)
	for _, r := range rows {
		b.WriteString(r + "\n")
	}
	fmt.Fprintf(&b, `
## %d nodes pulling one image at once

Each round starts %d fresh sharedcontent nodes (content + diff proxy) on one new shared root: the first embeds the
coordinator and serves it to the others on loopback (`+"`--coordinator-listen`"+`), each node its own containerd and daemon. All
pull the image at once; "wall" is from the start until the last pull ends, and each node's image is checked complete and
unpacked through its daemon. Target (docs/design.md §5.6): within 1.3× of one fresh node alone (the "after" setup above). The
peer is stock containerd: %d stock nodes, each with its own content store (stock cannot share one), every node
downloading and unpacking, against one stock node alone. The four setups take turns, the order rotated each round.
Then the same with `+"`ctr content fetch`"+` (no unpack): the download is shared, each node's unpack is its own.

- **vs one node:** median wall / the median of one node alone of the same kind; "per round" as above, against the
  one-node pull of the same round.
- **Daemons' CPU:** the CPU time (user + system, `+"`/proc/PID/stat`"+`) of every node's containerd and
  containerd-sharedcontent during the pull, summed over the nodes; median of the rounds. It leaves out the registry
  (the test process) and the kernel's writeback threads.
- **CPU floor:** that CPU time spread over the machine's %d cores, against one node's median wall: no pull of that
  many nodes can end sooner on this machine, however it is coordinated. Where the floor is above the target, the
  target cannot be met here: %d nodes are %d hosts' work on one 2-core machine.
- **Registry bytes:** what the registry sent per round, against the image's size.

| image | what | setup | rounds | median wall | min–max | vs one node | per round | daemons' CPU | CPU floor | registry bytes |
| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |
`, benchClusterNodes, benchClusterNodes, benchClusterNodes, runtime.NumCPU(), benchClusterNodes, benchClusterNodes)
	for _, r := range clusterRows {
		b.WriteString(r + "\n")
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}
