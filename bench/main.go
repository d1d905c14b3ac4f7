// Command bench measures sharedcontent against what a user would otherwise
// pick, side by side in one run on one machine, and reports ratios (issue
// 6): the coordinator against etcd and Redis, pull deduplication against
// uncoordinated nodes, notification latency against polling and
// containerd's backoff, and the proxy plugin's overhead against the store
// used directly. It prints a table and, with -out, writes BENCHMARKS.md and
// PNG charts there (creating the directory). `make bench` runs it. SIGTERM
// or Ctrl-C stops it at once, exit 1, with the processes it started
// (signals.go).
//
// etcd and redis-server must be on PATH (Debian: etcd-server,
// redis-server); the benchmark starts them on loopback ports with
// temporary data directories and stops them at the end.
package main

import (
	"bufio"
	"bytes"
	"context"
	_ "embed"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/containerd/log"

	"github.com/sharedcontent/sharedcontent/bench/scale"
	"github.com/sharedcontent/sharedcontent/internal/testutil/registry"
)

// Defaults, sized so that the whole run takes a few minutes on 2 cores.
const (
	// defaultLockRound is one timed round of one lock system in one
	// scenario; defaultLockRounds rounds are interleaved across systems and
	// the median rate is reported. On this shared 2-core machine one
	// system's rate moves by ±10% between rounds; five rounds keep the
	// median from resting on one bad round of either side.
	defaultLockRound  = 1500 * time.Millisecond
	defaultLockRounds = 5
	// defaultLayers × defaultLayerMiB is the image of the pull test
	// (docs/BENCHMARKS.md "Targets": 6 × 32 MiB).
	defaultLayers   = 6
	defaultLayerMiB = 32
	// defaultBandwidth is the registry's total uplink in MB/s, shared by
	// every download.
	defaultBandwidth = 100
	// defaultDedupReps repeats each sharedcontent pull (hand-offs and
	// scheduling vary); uncoordinated pulls are bandwidth-bound and run
	// once.
	defaultDedupReps = 3
	// defaultNotifyCase time-boxes the push measurement per waiter count;
	// defaultDownload is the holder's simulated download in the polling
	// and backoff measurements.
	defaultNotifyCase = 3 * time.Second
	defaultDownload   = 2 * time.Second
	// defaultBlobMiB is the blob of the plugin test; defaultPluginReps
	// runs of each path, median reported.
	defaultBlobMiB    = 512
	defaultPluginReps = 3
)

// Targets (docs/BENCHMARKS.md "Targets": the pull wall is docs/design.md
// §5.6's, the coordinator's are the lock service's).
const (
	targetDistinctVsRedis = 0.8
	targetHotVsEtcd       = 20.0
	targetBytesVsImage    = 1.05
	targetWallN8VsN1      = 1.1
	targetPluginOverhead  = 0.15
	// fifoMinShare: on the hot key, the client with the fewest cycles must
	// have at least this share of the busiest one's.
	fifoMinShare = 0.9
)

type config struct {
	out          string
	sections     map[string]bool
	lockRound    time.Duration
	lockRounds   int
	lockClients  []int
	layers       int
	layerMiB     int
	bandwidthMBs int
	nodes        []int
	dedupReps    int
	notifyCase   time.Duration
	download     time.Duration
	waiters      []int
	blobMiB      int
	pluginReps   int
	profileDir   string
	goBench      string
	scale        scaleFlags
	ha           haFlags
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func run() error {
	cfg, err := parseFlags()
	if err != nil {
		return err
	}
	log.SetLevel("error")

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	followGoRun()
	r := &report{cfg: cfg, started: time.Now(), loadBefore: scale.Loadavg()}
	if err := untilDone(ctx, func() error { return r.runSections(ctx) }); err != nil {
		return err
	}
	r.took = time.Since(r.started)
	r.loadAfter = scale.Loadavg()
	return r.write()
}

// runSections runs the sections cfg.sections names, in order, reporting
// progress on stderr.
func (r *report) runSections(ctx context.Context) error {
	cfg := r.cfg
	progress := func(s string) { fmt.Fprintf(os.Stderr, "[%6.1fs] %s\n", time.Since(r.started).Seconds(), s) }
	if cfg.sections["lock"] {
		if err := r.runLock(ctx, progress); err != nil {
			return fmt.Errorf("lock: %w", err)
		}
	}
	if cfg.sections["dedup"] {
		if err := r.runDedup(progress); err != nil {
			return fmt.Errorf("dedup: %w", err)
		}
	}
	if cfg.sections["prefetch"] {
		if err := r.runPrefetch(progress); err != nil {
			return fmt.Errorf("prefetch: %w", err)
		}
	}
	if cfg.sections["notify"] {
		res, err := notifyBench(cfg.waiters, cfg.notifyCase, cfg.download, progress)
		if err != nil {
			return fmt.Errorf("notify: %w", err)
		}
		r.notify = res
	}
	if cfg.sections["plugin"] {
		res, err := overheadBench(int64(cfg.blobMiB)<<20, cfg.pluginReps, cfg.profileDir, progress)
		if err != nil {
			return fmt.Errorf("plugin: %w", err)
		}
		r.plugin = res
	}
	if cfg.sections["scale"] {
		if err := r.runScale(progress); err != nil {
			return fmt.Errorf("scale: %w", err)
		}
	}
	if cfg.sections["ha"] {
		if err := r.runHA(ctx, progress); err != nil {
			return fmt.Errorf("ha: %w", err)
		}
	}
	return nil
}

// write prints the tables and, with cfg.out set, writes the charts and
// BENCHMARKS.md there.
func (r *report) write() error {
	var table bytes.Buffer
	r.writeTables(&table)
	r.writeTargets(&table)
	if r.scale != nil {
		r.writeScaleBlock(&table)
	}
	if r.ha != nil {
		r.writeHABlock(&table)
	}
	os.Stdout.Write(table.Bytes())
	if r.cfg.out == "" {
		return nil
	}
	if err := os.MkdirAll(r.cfg.out, 0o755); err != nil {
		return err
	}
	doc := filepath.Join(r.cfg.out, "BENCHMARKS.md")
	if r.onlyBlocks() {
		if r.scale != nil {
			if err := r.spliceScale(doc); err != nil {
				return err
			}
		}
		if r.ha != nil {
			return spliceBlock(doc, haBegin, haEnd, r.writeHABlock)
		}
		return nil
	}
	if r.dedup != nil {
		if err := writeCharts(r.cfg.out, r.dedup, r.imageBytes); err != nil {
			return fmt.Errorf("charts: %w", err)
		}
	}
	return r.writeDoc(doc)
}

// onlyBlocks: the run is the scale or HA section's alone (or both), which
// rewrite only their blocks of the doc.
func (r *report) onlyBlocks() bool {
	for s := range r.cfg.sections {
		if s != "scale" && s != "ha" {
			return false
		}
	}
	return len(r.cfg.sections) > 0
}

// parseFlags reads the command line into a config.
func parseFlags() (config, error) {
	var cfg config
	var sections, lockClients, nodes, waiters string
	flag.StringVar(&cfg.out, "out", "", "directory for BENCHMARKS.md and the PNG charts (empty: stdout only)")
	flag.StringVar(&sections, "only", "lock,dedup,prefetch,notify,plugin", "sections to run, comma-separated (prefetch: N=3 nodes pulling a prefetched image against a cold one; scale: the scale benchmark, which `make bench-scale` runs; ha: HA on etcd, which `make bench-ha` runs)")
	flag.DurationVar(&cfg.lockRound, "lock-round", defaultLockRound, "duration of one lock round")
	flag.IntVar(&cfg.lockRounds, "lock-rounds", defaultLockRounds, "lock rounds per system and scenario (median reported)")
	flag.StringVar(&lockClients, "lock-clients", "16,64", "concurrent lock clients")
	flag.IntVar(&cfg.layers, "layers", defaultLayers, "image layers of the pull test")
	flag.IntVar(&cfg.layerMiB, "layer-mib", defaultLayerMiB, "MiB per layer")
	flag.IntVar(&cfg.bandwidthMBs, "bandwidth-mbps", defaultBandwidth, "registry uplink in MB/s, shared by all downloads")
	flag.StringVar(&nodes, "nodes", "1,2,4,8", "node counts of the pull test")
	flag.IntVar(&cfg.dedupReps, "dedup-reps", defaultDedupReps, "repetitions of each sharedcontent pull (median wall reported)")
	flag.DurationVar(&cfg.notifyCase, "notify-case", defaultNotifyCase, "time box of each push-notification case")
	flag.DurationVar(&cfg.download, "download", defaultDownload, "the holder's download in the polling and backoff simulations")
	flag.StringVar(&waiters, "waiters", "1,10,100", "waiters per key in the notification test")
	flag.IntVar(&cfg.blobMiB, "blob-mib", defaultBlobMiB, "blob size of the plugin test")
	flag.IntVar(&cfg.pluginReps, "plugin-reps", defaultPluginReps, "runs per path in the plugin test (median reported)")
	flag.StringVar(&cfg.profileDir, "profile", "", "write CPU profiles of sharedcontent's part of each section here")
	flag.StringVar(&cfg.goBench, "gobench", "", "output of the Go benchmarks (go test -bench) to include in the doc")
	cfg.scale.register(flag.CommandLine)
	cfg.ha.register(flag.CommandLine)
	flag.Parse()
	var err error
	if cfg.lockClients, err = ints(lockClients); err != nil {
		return cfg, err
	}
	if cfg.nodes, err = ints(nodes); err != nil {
		return cfg, err
	}
	if cfg.waiters, err = ints(waiters); err != nil {
		return cfg, err
	}
	cfg.sections = map[string]bool{}
	for _, s := range strings.Split(sections, ",") {
		cfg.sections[strings.TrimSpace(s)] = true
	}
	return cfg, nil
}

func ints(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("%q: want positive integers separated by commas", s)
		}
		out = append(out, n)
	}
	return out, nil
}

// report collects every section's results.
type report struct {
	cfg        config
	loadBefore string // /proc/loadavg at the start
	loadAfter  string
	started    time.Time
	took       time.Duration
	lock       []lockResult
	peers      map[string]string // name → version
	dedup      []dedupResult
	imageBytes int64
	prefetch   *prefetchResult
	notify     []notifyResult
	plugin     []overheadResult

	scale                           *scale.Results
	scaleStarted                    time.Time
	scaleTook                       time.Duration
	scaleLoadBefore, scaleLoadAfter string

	ha *haResults
}

func (r *report) runLock(ctx context.Context, progress func(string)) error {
	progress("lock: starting etcd and redis-server on loopback")
	etcd, etcdCfg, err := startEtcd(ctx)
	if err != nil {
		return err
	}
	defer etcd.stop()
	rds, err := startRedis(ctx)
	if err != nil {
		return err
	}
	defer rds.stop()
	ours, err := startOurs()
	if err != nil {
		return err
	}
	defer ours.stop()
	r.peers = map[string]string{"etcd": version("etcd", "--version"), "redis": version("redis-server", "--version")}

	var scenarios []lockScenario
	for _, hot := range []bool{false, true} {
		for _, c := range r.cfg.lockClients {
			scenarios = append(scenarios, lockScenario{clients: c, hot: hot})
		}
	}
	systems := []*lockSystem{ours, etcdSystem(etcd, etcdCfg), redisSystem(rds)}
	for _, start := range []func() (*lockSystem, error){startNetHTTPFloor, startFastHTTPFloor} {
		floor, err := start()
		if err != nil {
			return err
		}
		defer floor.stop()
		systems = append(systems, floor)
	}
	res, err := lockBench(systems, scenarios, r.cfg.lockRounds, r.cfg.lockRound, progress)
	if err != nil {
		return err
	}
	r.lock = res
	if r.cfg.profileDir != "" {
		// A separate run of sharedcontent alone under the profiler, so
		// that the peers' client work does not blur it.
		for _, sc := range scenarios {
			path := filepath.Join(r.cfg.profileDir, fmt.Sprintf("lock-%s-%d.pprof", map[bool]string{false: "distinct", true: "hot"}[sc.hot], sc.clients))
			progress("lock: profiling sharedcontent, " + sc.String() + " → " + path)
			stopProfile, err := startProfile(path)
			if err != nil {
				return err
			}
			_, err = lockBench([]*lockSystem{ours}, []lockScenario{sc}, 1, 3*time.Second, func(string) {})
			stopProfile()
			if err != nil {
				return err
			}
		}
	}
	return nil
}

func (r *report) runDedup(progress func(string)) error {
	progress(fmt.Sprintf("dedup: pushing a %d × %d MiB image", r.cfg.layers, r.cfg.layerMiB))
	reg, img, err := r.pullImage("bench/app:latest")
	if err != nil {
		return err
	}
	defer reg.Close()
	profile := ""
	if r.cfg.profileDir != "" {
		profile = filepath.Join(r.cfg.profileDir, "dedup-sharedcontent.pprof")
	}
	res, err := dedupBench(reg, img, r.cfg.nodes, r.cfg.dedupReps, 1, profile, progress)
	r.dedup = res
	return err
}

// pullImage starts the pull sections' registry (throttled to the
// uplink) with the image of -layers × -layer-mib pushed as ref.
func (r *report) pullImage(ref string) (*registry.Registry, registry.Image, error) {
	reg, err := registry.Start(registry.WithBandwidth(r.cfg.bandwidthMBs * 1_000_000))
	if err != nil {
		return nil, registry.Image{}, err
	}
	img, err := reg.PushRandom(context.Background(), ref, r.cfg.layers, int64(r.cfg.layerMiB)<<20)
	if err != nil {
		reg.Close()
		return nil, registry.Image{}, err
	}
	r.imageBytes = img.Size()
	return reg, img, nil
}

// runPrefetch runs the prefetch section on the dedup section's image
// and uplink.
func (r *report) runPrefetch(progress func(string)) error {
	progress(fmt.Sprintf("prefetch: pushing a %d × %d MiB image", r.cfg.layers, r.cfg.layerMiB))
	reg, img, err := r.pullImage("bench/prefetch:latest")
	if err != nil {
		return err
	}
	defer reg.Close()
	res, err := prefetchBench(reg, img, r.cfg.dedupReps, progress)
	r.prefetch = &res
	return err
}

// version returns the first line of `bin arg`.
func version(bin, arg string) string {
	out, err := exec.Command(bin, arg).Output()
	if err != nil {
		return "unknown"
	}
	line, _, _ := strings.Cut(string(out), "\n")
	return strings.TrimSpace(line)
}

// ---- tables ----

func (r *report) find(system string, sc lockScenario) (lockResult, bool) {
	for _, l := range r.lock {
		if l.System == system && l.Scenario == sc {
			return l, true
		}
	}
	return lockResult{}, false
}

func ms(d time.Duration) string {
	switch {
	case d == 0:
		return "-"
	case d < 10*time.Millisecond:
		return fmt.Sprintf("%.2f ms", float64(d)/1e6)
	case d < 10*time.Second:
		return fmt.Sprintf("%.0f ms", float64(d)/1e6)
	}
	return fmt.Sprintf("%.1f s", d.Seconds())
}

func conns(x float64) string {
	if x < 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f", x)
}

func us(d time.Duration) string { return fmt.Sprintf("%.0f µs", float64(d)/1e3) }

func mib(n int64) string { return fmt.Sprintf("%.0f MiB", float64(n)/(1<<20)) }

// markdown tables, which also read well on a terminal.
type mdTable struct {
	head []string
	rows [][]string
}

func (t *mdTable) row(cells ...string) { t.rows = append(t.rows, cells) }

func (t *mdTable) write(w io.Writer) {
	widths := make([]int, len(t.head))
	for i, h := range t.head {
		widths[i] = len([]rune(h))
	}
	for _, r := range t.rows {
		for i, c := range r {
			widths[i] = max(widths[i], len([]rune(c)))
		}
	}
	line := func(cells []string) {
		fmt.Fprint(w, "|")
		for i, c := range cells {
			fmt.Fprintf(w, " %s%s |", c, strings.Repeat(" ", widths[i]-len([]rune(c))))
		}
		fmt.Fprintln(w)
	}
	line(t.head)
	sep := make([]string, len(t.head))
	for i := range sep {
		sep[i] = strings.Repeat("-", widths[i])
	}
	line(sep)
	for _, r := range t.rows {
		line(r)
	}
	fmt.Fprintln(w)
}

func (r *report) writeTables(w io.Writer) {
	if len(r.lock) > 0 {
		fmt.Fprintf(w, "### 1. Lock service: lock+unlock cycles (median of %d rounds of %s; latencies pooled)\n\n", r.cfg.lockRounds, r.cfg.lockRound)
		t := mdTable{head: []string{"scenario", "system", "cycles/s", "vs redis", "vs etcd", "p50", "p99", "max wait", "cycles per client min/max (CV)", "CPU per cycle", "new TCP conns per cycle", "errors"}}
		for _, l := range r.lock {
			redis, _ := r.find("redis", l.Scenario)
			etcd, _ := r.find("etcd", l.Scenario)
			fair := "-"
			if l.Scenario.hot {
				fair = fmt.Sprintf("%d/%d (%.2f)", l.MinCount, l.MaxCount, l.CountCV)
			}
			t.row(l.Scenario.String(), l.System, fmt.Sprintf("%.0f", l.Rate),
				ratio(l.Rate, redis.Rate), ratio(l.Rate, etcd.Rate),
				ms(l.P50), ms(l.P99), ms(l.MaxWait), fair, us(l.CPUPerCycle), conns(l.ConnsPerCycle), errCell(l))
		}
		t.write(w)
	}
	if len(r.dedup) > 0 {
		fmt.Fprintf(w, "### 2. Pull deduplication: %d × %d MiB image (%s), registry throttled to %d MB/s in total\n\n", r.cfg.layers, r.cfg.layerMiB, mib(r.imageBytes), r.cfg.bandwidthMBs)
		t := mdTable{head: []string{"nodes", "setup", "registry bytes", "× image", "max GETs of a blob", "wall (all nodes have it)", "wall ÷ N=1", "registry done at", "wait after last byte"}}
		base := map[string]time.Duration{}
		for _, d := range r.dedup {
			if d.Nodes == 1 {
				base[d.Setup] = d.Wall
			}
		}
		for _, d := range r.dedup {
			walls := fmt.Sprintf("%.2f s", d.Wall.Seconds())
			if len(d.Walls) > 1 {
				var all []string
				for _, x := range d.Walls {
					all = append(all, fmt.Sprintf("%.2f", x.Seconds()))
				}
				walls = fmt.Sprintf("%.2f s (runs %s)", d.Wall.Seconds(), strings.Join(all, ", "))
			}
			t.row(strconv.Itoa(d.Nodes), d.Setup, mib(d.Bytes), fmt.Sprintf("%.3f", float64(d.Bytes)/float64(r.imageBytes)),
				strconv.Itoa(d.MaxGets), walls, ratio(float64(d.Wall), float64(base[d.Setup])),
				fmt.Sprintf("%.2f s", d.Transfer.Seconds()), fmt.Sprintf("%.2f s", (d.Wall-d.Transfer).Seconds()))
		}
		t.write(w)
	}
	if p := r.prefetch; p != nil {
		fmt.Fprintf(w, "### 2b. Prefetch: %d nodes pulling a prefetched image against a cold one (%s, registry throttled to %d MB/s)\n\n", prefetchNodes, mib(r.imageBytes), r.cfg.bandwidthMBs)
		fmt.Fprintf(w, "The prefetch itself (`sharedcontentctl prefetch`'s path: a library-mode store under the pull locks): %.2f s, %s from the registry; then the nodes pull.\n\n", p.Prefetch.Seconds(), mib(p.PrefetchBytes))
		t := mdTable{head: []string{"nodes", "image", "registry bytes", "max GETs of a blob", "wall (all nodes have it)", "wall ÷ cold"}}
		for _, d := range []dedupResult{p.Cold, p.Warm} {
			t.row(strconv.Itoa(d.Nodes), d.Setup, mib(d.Bytes), strconv.Itoa(d.MaxGets), fmt.Sprintf("%.2f s", d.Wall.Seconds()), ratio(float64(d.Wall), float64(p.Cold.Wall)))
		}
		t.write(w)
	}
	if len(r.notify) > 0 {
		fmt.Fprintf(w, "### 3. Notification latency: holder's Unlock(success) → waiter proceeds\n\n")
		t := mdTable{head: []string{"waiters", "method", "samples", "p50", "p99", "push is faster (p50)", "push is faster (p99)"}}
		push := map[int]notifyResult{}
		for _, n := range r.notify {
			if n.Method == "push (SSE)" {
				push[n.Waiters] = n
			}
		}
		for _, n := range r.notify {
			p := push[n.Waiters]
			a, b := "-", "-"
			if n.Method != p.Method {
				a, b = ratio(float64(n.P50), float64(p.P50)), ratio(float64(n.P99), float64(p.P99))
			}
			method := n.Method
			if n.Unlock > 0 {
				method += fmt.Sprintf(" (Unlock call p50 %s)", ms(n.Unlock))
			}
			t.row(strconv.Itoa(n.Waiters), method, strconv.Itoa(n.Samples), ms(n.P50), ms(n.P99), a, b)
		}
		t.write(w)
	}
	if len(r.plugin) > 0 {
		fmt.Fprintf(w, "### 4. Plugin overhead: %d MiB blob, contentv2 store directly vs through the gRPC proxy (median of %d)\n\n", r.cfg.blobMiB, r.cfg.pluginReps)
		t := mdTable{head: []string{"operation", "direct MB/s", "proxy MB/s", "overhead"}}
		for _, p := range r.plugin {
			t.row(p.Op, fmt.Sprintf("%.0f", p.Direct), fmt.Sprintf("%.0f", p.Proxy), fmt.Sprintf("%+.1f%%", 100*p.Overhead()))
		}
		t.write(w)
	}
}

func errCell(l lockResult) string {
	if l.Errors == 0 {
		return "0"
	}
	msg := l.FirstError
	if len(msg) > 60 {
		msg = msg[:60] + "…"
	}
	return fmt.Sprintf("%d (%s)", l.Errors, msg)
}

func ratio(a, b float64) string {
	if b == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f×", a/b)
}

// ---- targets ----

// verdict is one target, met or not, with the figure.
type verdict = scale.Verdict

func (r *report) targets() []verdict {
	var out []verdict
	for _, l := range r.lock {
		if l.System != "sharedcontent" {
			continue
		}
		sc := l.Scenario
		if !sc.hot {
			redis, _ := r.find("redis", sc)
			got := l.Rate / redis.Rate
			out = append(out, verdict{
				Name: fmt.Sprintf("lock, %s: ≥ %.1f× Redis", sc, targetDistinctVsRedis),
				Met:  got >= targetDistinctVsRedis,
				Detail: fmt.Sprintf("%.2f× (%.0f vs %.0f cycles/s)%s", got, l.Rate, redis.Rate,
					shortBy(got, targetDistinctVsRedis)),
			})
			continue
		}
		etcd, _ := r.find("etcd", sc)
		got := l.Rate / etcd.Rate
		// FIFO hands the key round-robin: every client waits for each of
		// the others once per turn, so all clients complete about as many
		// cycles. (Redis, with no queue, shows the opposite.)
		fifo := float64(l.MinCount) >= fifoMinShare*float64(l.MaxCount)
		out = append(out, verdict{
			Name: fmt.Sprintf("lock, %s: ≥ %.0f× etcd, FIFO kept", sc, targetHotVsEtcd),
			Met:  got >= targetHotVsEtcd && fifo,
			Detail: fmt.Sprintf("%.1f× (%.0f vs %.0f cycles/s)%s; cycles per client %d..%d (%s)",
				got, l.Rate, etcd.Rate, shortBy(got, targetHotVsEtcd), l.MinCount, l.MaxCount,
				map[bool]string{true: "round-robin: FIFO kept", false: "NOT round-robin"}[fifo]),
		})
	}
	var n1, n8 time.Duration
	worst, worstN := 0.0, 0
	for _, d := range r.dedup {
		if d.Setup != "sharedcontent" {
			continue
		}
		if x := float64(d.Bytes) / float64(r.imageBytes); x > worst {
			worst, worstN = x, d.Nodes
		}
		switch d.Nodes {
		case 1:
			n1 = d.Wall
		case 8:
			n8 = d.Wall
		}
	}
	if len(r.dedup) > 0 {
		out = append(out, verdict{
			Name:   fmt.Sprintf("pull: registry bytes ≤ %.2f× the image for every N", targetBytesVsImage),
			Met:    worst <= targetBytesVsImage,
			Detail: fmt.Sprintf("worst %.3f× (N=%d)", worst, worstN),
		})
	}
	if n1 > 0 && n8 > 0 {
		got := float64(n8) / float64(n1)
		d := fmt.Sprintf("%.2f× (%.2f s vs %.2f s)", got, n8.Seconds(), n1.Seconds())
		if got > targetWallN8VsN1 {
			d += fmt.Sprintf(", missed by %.0f%% (%.2f s over)", 100*(got/targetWallN8VsN1-1), (n8 - time.Duration(targetWallN8VsN1*float64(n1))).Seconds())
		}
		out = append(out, verdict{Name: fmt.Sprintf("pull: wall at N=8 ≤ %.1f× N=1", targetWallN8VsN1), Met: got <= targetWallN8VsN1, Detail: d})
	}
	for _, p := range r.plugin {
		o := p.Overhead()
		d := fmt.Sprintf("%+.1f%%", 100*o)
		if o > targetPluginOverhead {
			d += fmt.Sprintf(", missed by %.1f points", 100*(o-targetPluginOverhead))
		}
		out = append(out, verdict{Name: fmt.Sprintf("plugin %s: overhead ≤ %.0f%%", p.Op, 100*targetPluginOverhead), Met: o <= targetPluginOverhead, Detail: d})
	}
	return out
}

func shortBy(got, want float64) string {
	if got >= want {
		return ""
	}
	return fmt.Sprintf(", missed by %.0f%%", 100*(1-got/want))
}

func (r *report) writeTargets(w io.Writer) {
	vs := r.targets()
	if len(vs) == 0 {
		return
	}
	fmt.Fprintf(w, "### Targets\n\n")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, v := range vs {
		mark := "MET   "
		if !v.Met {
			mark = "MISSED"
		}
		fmt.Fprintf(tw, "- %s\t%s\t%s\n", mark, v.Name, v.Detail)
	}
	tw.Flush()
	fmt.Fprintln(w)
}

// ---- the document ----

func machine() (cores int, model, mem string) {
	cores = runtime.NumCPU()
	if f, err := os.Open("/proc/cpuinfo"); err == nil {
		defer f.Close()
		n := 0
		s := bufio.NewScanner(f)
		for s.Scan() {
			k, v, ok := strings.Cut(s.Text(), ":")
			k = strings.TrimSpace(k)
			switch {
			case !ok:
			case k == "processor":
				n++
			case k == "model name" && model == "":
				model = strings.TrimSpace(v)
			}
		}
		if n > 0 {
			cores = n
		}
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(line, "MemTotal:") {
				var kb int64
				fmt.Sscanf(strings.TrimSpace(strings.TrimPrefix(line, "MemTotal:")), "%d", &kb)
				mem = fmt.Sprintf("%.1f GiB", float64(kb)/(1<<20))
			}
		}
	}
	return cores, model, mem
}

func (r *report) writeDoc(path string) error {
	var b bytes.Buffer
	cores, model, mem := machine()
	fmt.Fprintf(&b, "# Benchmarks\n\n")
	fmt.Fprintf(&b, "Generated by `make bench`, which runs the Go benchmarks of `lockserver/`, `lockclient/` and `cmd/sharedcontent-lockserver/`, then `cd bench && go run . -out ../docs` (the benchmark module, with the peers' client libraries: this header and sections 1 to 4), then `make bench-abuse` (printed, not written here), `make bench-scale` and `make bench-ha` (each rewrites its own block below, with its own date and load) and `make bench-containerd` (docs/bench-containerd.md). Do not edit by hand: rerun it. Every comparison below ran side by side in this one run, on this one machine.\n\n")
	fmt.Fprintf(&b, "- **Date:** %s\n", r.started.UTC().Format("2006-01-02 15:04 MST"))
	fmt.Fprintf(&b, "- **Machine:** %d cores (%s), %s memory (from /proc)\n", cores, model, mem)
	fmt.Fprintf(&b, "- **Go:** %s %s/%s\n", runtime.Version(), runtime.GOOS, runtime.GOARCH)
	if r.peers != nil {
		fmt.Fprintf(&b, "- **Peers:** %s; %s (Debian packages etcd-server and redis-server, started by the benchmark on loopback ports with temporary data directories)\n", r.peers["etcd"], r.peers["redis"])
	}
	fmt.Fprintf(&b, "- **Command:** `make bench` (the bench/ part took %s; flags: `go run . -h`; `-profile DIR` writes CPU profiles of sharedcontent's side of each section)\n", r.took.Round(time.Second))
	fmt.Fprintf(&b, "- **Load average** (1, 5, 15 min) at the start: %s; at the end: %s. Anything else running on the machine shows here and slows every system alike.\n", r.loadBefore, r.loadAfter)
	fmt.Fprintf(&b, "- **Everything runs on the same %d cores:** the coordinator, the nodes and every system's clients run in the benchmark's process; etcd and redis-server are separate processes on the same machine. Nothing is pinned, so the numbers include the CPU contention between server and clients that a single small machine has.\n\n", cores)

	fmt.Fprintf(&b, "## Results\n\n")
	r.writeTables(&b)
	fmt.Fprintf(&b, "## Targets\n\n")
	writeVerdicts(&b, r.targets())
	if len(r.dedup) > 0 {
		fmt.Fprintf(&b, "![registry bytes vs N](%s)\n\n![wall time vs N](%s)\n\n", chartBytes, chartWall)
	}
	b.WriteString(methodology)
	if r.cfg.goBench != "" {
		if gb, err := os.ReadFile(r.cfg.goBench); err == nil && len(gb) > 0 {
			fmt.Fprintf(&b, "\n## Go benchmarks (`go test -run '^$' -bench . -skip Notify -benchmem ./lockserver/ ./lockclient/`, then `go test -run '^$' -bench Notify -benchtime 400x -benchmem ./lockclient/`, then `go test -v -run '^$' -bench . -benchtime 1x ./cmd/sharedcontent-lockserver/`; same run)\n\n")
			fmt.Fprintf(&b, "Memory per held lock and per queued waiter are `B/held-lock` and `B/waiter`. `BenchmarkNotify` is the push latency with a bbolt (fsync per reference change) or in-memory reference store. `BenchmarkMemoryIdleKeys` and `BenchmarkWaiters` run the stand-alone coordinator in its own process (memory under abuse, [design.md §10.3](design.md#103-bounds-under-abuse)): its VmRSS and Go heap in MiB with 200k keys held, released, forgotten and after its next collection; and the time until each of 5,000 waiters has its outcome.\n\n```\n%s```\n\n", benchLines(gb))
		}
	}
	if block := r.scaleBlock(path); block != nil {
		fmt.Fprintln(&b)
		b.Write(block)
	}
	if block := r.haBlock(path); block != nil {
		fmt.Fprintln(&b)
		b.Write(block)
	}
	if block := markedBlock(path, leversBegin, leversEnd, false, nil); block != nil {
		fmt.Fprintln(&b)
		b.Write(block)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, b.Bytes(), 0o644)
}

// writeVerdicts writes a markdown list of verdicts.
func writeVerdicts(w io.Writer, vs []verdict) {
	for _, v := range vs {
		mark := "**met**"
		if !v.Met {
			mark = "**MISSED**"
		}
		fmt.Fprintf(w, "- %s — %s: %s\n", mark, v.Name, v.Detail)
	}
	fmt.Fprintln(w)
}

// methodology is the doc's fixed part: how each number is made, and what
// bounds the targets that the design cannot meet on this machine.
//
//go:embed methodology.md
var methodology string
