package e2e

import (
	"cmp"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sharedcontent/sharedcontent/internal/testutil/etcdtest"
)

// TestChaosReal is the real-process chaos test (the faults of docs/design.md §8): a stand-alone
// coordinator and three nodes (containerd + containerd-sharedcontent,
// content and diff proxies), each node reaching the coordinator through its
// own netProxy. Every node pulls and removes (`ctr images rm --sync`, which
// runs containerd's GC) random images that share layers, all at once,
// while one fault at a time is injected at random (chaosFaults). After
// every operation the node checks the invariant: every blob its containerd
// lists reads back with its digest. Then every fault heals, every node
// pulls every image, every node removes everything, and nothing may be
// left in the shared root.
//
//	SHAREDCONTENT_E2E_CHAOS_DURATION  how long faults are injected (default chaosDefaultDuration; make chaos: 10m)
//	SHAREDCONTENT_E2E_CHAOS_SEED      the seed (default: the time); printed
//	SHAREDCONTENT_E2E_CHAOS_FAULTS    comma-separated fault kinds (default: all of chaosFaults; "all": with chaosStorageFaults too, and chaosGlusterFaults on GlusterFS)
//	SHAREDCONTENT_E2E_CHAOS_FS        glusterfs: every node's root is its own mount of a replica-3 GlusterFS volume (chaosgluster_test.go)
//
// The seed fixes every random choice (each node's operations, the faults,
// their targets and lengths); the timing between the actors is the
// machine's, so a replay runs the same sequences, not the same
// interleaving.
func TestChaosReal(t *testing.T) {
	alongside(t)
	runChaos(t, nil, chaosDefaultDuration)
}

// TestChaosRealHA is TestChaosReal with the coordinator highly available
// (docs/design.md §7): three replicas on a real 3-member etcd
// cluster, each node given every replica's URL, each URL through its own
// netProxy (a link fault cuts them all). Besides chaosFaults (whose
// coordinator faults act on every replica at once), chaosHAFaults kill,
// terminate and stop the leading replica and kill etcd members, one or
// two at once (quorum lost: nodes keep pulling per §8.8). The same
// variables select the length, the seed and the kinds (default: all of
// both); its default length is chaosHADefaultDuration. `make chaos
// CHAOS_COORDINATOR=etcd` runs it.
func TestChaosRealHA(t *testing.T) {
	alongside(t)
	needSharedcontent(t)
	etcd := etcdtest.Start(t, etcdtest.Options{})
	runChaos(t, &chaosHA{etcd: etcd}, chaosHADefaultDuration)
}

// runChaos runs the chaos test: on a stand-alone coordinator when ha is
// nil, else on ha's replicas; duration is the default length of faults.
func runChaos(t *testing.T, ha *chaosHA, duration time.Duration) {
	needSharedcontent(t)
	if s := os.Getenv(envChaosDuration); s != "" {
		d, err := time.ParseDuration(s)
		require.NoError(t, err, "%s", envChaosDuration)
		duration = d
	}
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv(envChaosSeed); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		require.NoError(t, err, "%s", envChaosSeed)
		seed = v
	}
	glusterfs, err := chaosFS(os.Getenv(envChaosFS))
	require.NoError(t, err)
	kinds, err := chaosKinds(os.Getenv(envChaosFaults), ha != nil, glusterfs)
	require.NoError(t, err, "%s", envChaosFaults)
	t.Logf("chaos: %s, seed %d, %v of faults (%s), kinds %s; replay: %s=%d %s=%s",
		chaosModeName(ha, glusterfs), seed, duration, envChaosDuration, strings.Join(kinds, ","), envChaosSeed, seed, envChaosFaults, strings.Join(kinds, ","))

	ch := newRealChaos(t, seed, kinds, ha, glusterfs)
	defer ch.summary(duration)
	ch.run(duration)
	if ch.glusterfs {
		ch.healVolume()
	}
	ch.heal()
	if ch.storage != nil {
		ch.restartAll()
		ch.heal()
		ch.checkAll("after healing, every node restarted")
	}
	ch.pullEverything()
	ch.checkAll("after healing, every node pulled every image")
	ch.removeEverything()
}

// Environment variables of TestChaosReal.
const (
	envChaosDuration = "SHAREDCONTENT_E2E_CHAOS_DURATION"
	envChaosSeed     = "SHAREDCONTENT_E2E_CHAOS_SEED"
	envChaosFaults   = "SHAREDCONTENT_E2E_CHAOS_FAULTS"
)

const (
	// chaosDefaultDuration is the short run of `make e2e` (and CI), and
	// chaosHADefaultDuration TestChaosRealHA's.
	chaosDefaultDuration   = 90 * time.Second
	chaosHADefaultDuration = 60 * time.Second
	// chaosSessionTTL, chaosNodeExpiry and chaosLeaseTTL are the
	// coordinator's: short, so that faults resolve quickly.
	chaosSessionTTL = 3 * time.Second
	chaosNodeExpiry = 20 * time.Second
	chaosLeaseTTL   = 5 * time.Second
	// chaosReapInterval and chaosReapGrace are the plugins' reaper flags.
	chaosReapInterval = 5 * time.Second
	chaosReapGrace    = 10 * time.Second
	// chaosPullTimeout bounds one pull (a cut-off node waits out its
	// session before it pulls unregistered).
	chaosPullTimeout = 90 * time.Second
	// chaosLayer is the size of each layer of the pool.
	chaosLayer = 1 << 20
	// chaosRecent is how far back a loss looks for the faults to blame.
	chaosRecent = time.Minute
	// chaosCleanTimeout bounds the end: the nodes' GCs and the reaper
	// reclaiming everything once every image is removed (a pull lock
	// abandoned by a killed plugin keeps its blob until its lease ends).
	chaosCleanTimeout = 2 * time.Minute
)

// chaosImages are the images of TestChaosReal, as indexes into a pool of
// layers: each layer is in two or three images.
var chaosImages = [][]int{{0, 1}, {0, 2}, {1, 2, 3}, {3, 4}, {4, 0}}

// chaosFaults are the fault kinds, each applied to one random node (or the
// coordinator) and healed before the next.
var chaosFaults = []string{
	"kill-plugin",           // kill -9 a node's containerd-sharedcontent, restart it up to 3 session TTLs later
	"kill-containerd",       // kill -9 a node's containerd, restart it
	"kill-node",             // kill -9 both, restart them
	"kill-coordinator",      // kill -9 the coordinator, restart it
	"blackhole",             // a node's coordinator link accepts and never answers, 3–20 s
	"refuse",                // a node's coordinator link resets connections, 3–20 s
	"delay",                 // every request of a node reaches the coordinator late (> session TTL/3), 3–20 s
	"late-keepalives",       // a node's session renewals reach the coordinator late, its other requests never, 3–20 s
	"wipe-state",            // stop a node's plugin, remove its --state-dir, restart it up to 3 session TTLs later (containerd's meta.db stays)
	"coordinator-down-long", // the coordinator stopped for longer than its --node-expiry, one node back 3–5 s after it
	"cut-past-expiry",       // a node black-holed for longer than --node-expiry
}

// chaosHAFaults are the fault kinds of TestChaosRealHA only (docs/design.md
// §7.2); there "kill-coordinator" and "coordinator-down-long" act on every
// replica.
var chaosHAFaults = []string{
	"leader-kill",      // kill -9 the leading replica; once another leads, restart it (a standby) up to 3 session TTLs later
	"leader-term",      // SIGTERM the leading replica (it resigns); once another leads, restart it up to 3 session TTLs later
	"leader-stop",      // SIGSTOP the leading replica past its etcd session TTL and until another leads, then SIGCONT
	"etcd-member-kill", // kill -9 one etcd member (etcd's leader half the time), restart it 3–20 s later
	"etcd-quorum-loss", // kill -9 two etcd members (quorum lost), restart them 5–40 s later
}

// chaosKinds parses SHAREDCONTENT_E2E_CHAOS_FAULTS: empty is every kind of
// the mode (ha: on etcd, with chaosHAFaults) but the storage ones; "all"
// adds chaosStorageFaults, and on GlusterFS (glusterfs) chaosGlusterFaults.
func chaosKinds(s string, ha, glusterfs bool) ([]string, error) {
	known := slices.Clone(chaosFaults)
	if ha {
		known = append(known, chaosHAFaults...)
	}
	storage := slices.Clone(chaosStorageFaults)
	if glusterfs {
		storage = append(storage, chaosGlusterFaults...)
	}
	switch strings.TrimSpace(s) {
	case "":
		return known, nil
	case "all":
		return append(known, storage...), nil
	}
	known = append(known, storage...)
	var out []string
	for _, k := range strings.Split(s, ",") {
		k = strings.TrimSpace(k)
		switch {
		case !ha && slices.Contains(chaosHAFaults, k):
			return nil, fmt.Errorf("fault kind %q needs the coordinator on etcd (TestChaosRealHA, make chaos CHAOS_COORDINATOR=etcd)", k)
		case !glusterfs && slices.Contains(chaosGlusterFaults, k):
			return nil, fmt.Errorf("fault kind %q needs the nodes' roots on GlusterFS (%s=glusterfs, make chaos CHAOS_FS=glusterfs)", k, envChaosFS)
		case !slices.Contains(known, k):
			return nil, fmt.Errorf("unknown fault kind %q; known: %s", k, strings.Join(known, ","))
		}
		out = append(out, k)
	}
	return out, nil
}

// realChaos is TestChaosReal's cluster and its tallies.
type realChaos struct {
	t     *testing.T
	c     *cluster
	seed  uint64
	rng   *rand.Rand // the fault injector's
	kinds []string
	ha    *chaosHA // the replicas and etcd; nil: a stand-alone coordinator
	// glusterfs: the shared root is a GlusterFS volume (storage is set).
	glusterfs bool
	// storage is the nodes' views of the shared root; nil when no storage
	// fault is chosen and not on GlusterFS (every node's --root is the
	// shared directory).
	storage *chaosStorage
	imgs    []testImage
	nodes   []*chaosNode
	start   time.Time

	stop chan struct{} // closed when the nodes stop operating
	wg   sync.WaitGroup

	mu         sync.Mutex
	ops        map[string]int // protected by mu: operations by outcome
	faults     map[string]int // protected by mu: faults by kind
	history    []faultRecord  // protected by mu: every fault, in order
	reads      int            // protected by mu: blobs read back intact
	readErrors int            // protected by mu: failed reads of blobs still intact in the shared dir
	lost       []string       // protected by mu: one line per lost blob
	lostSeen   map[string]bool
	blame      map[string]int // protected by mu: losses by recent fault kind
	healErrs   []string       // protected by mu: what did not heal or leaked
	// failovers are the times from a leader fault to another replica
	// leading, by kind; protected by mu.
	failovers map[string][]time.Duration
}

// faultRecord is one injected fault.
type faultRecord struct {
	kind, target string
	start, end   time.Time // end is zero while it lasts
}

func (f faultRecord) String() string {
	end := "ongoing"
	if !f.end.IsZero() {
		end = fmt.Sprintf("%.1fs", f.end.Sub(f.start).Seconds())
	}
	return fmt.Sprintf("%s %s at %s (%s)", f.kind, f.target, f.start.Format("15:04:05.0"), end)
}

// newRealChaos starts the registry, the coordinator (ha nil: a
// stand-alone one; else ha's replicas) and three nodes (on GlusterFS when
// glusterfs), and pushes the images.
func newRealChaos(t *testing.T, seed uint64, kinds []string, ha *chaosHA, glusterfs bool) *realChaos {
	t.Helper()
	ch := &realChaos{t: t, seed: seed, rng: rand.New(rand.NewPCG(seed, seed^0xc4a05)), kinds: kinds, ha: ha, glusterfs: glusterfs,
		stop: make(chan struct{}), ops: map[string]int{}, faults: map[string]int{},
		lostSeen: map[string]bool{}, blame: map[string]int{}, failovers: map[string][]time.Duration{}}
	args := []string{"--session-ttl", chaosSessionTTL.String(), "--node-expiry", chaosNodeExpiry.String(),
		"--lease-ttl", chaosLeaseTTL.String(), "--reap-grace", chaosReapGrace.String()}
	links := make([]chaosLink, 3)
	ch.c = newFaultCluster(t, faultOpts{
		lockServerArgs: args,
		coordinator:    ha.starter(args),
		lockURL: func(ls *lockServer, i int) string {
			var urls []string
			for _, c := range ha.replicasOr(ls) {
				p := startNetProxy(t, c.addr)
				links[i] = append(links[i], p)
				urls = append(urls, p.url())
			}
			return strings.Join(urls, ",")
		},
		pluginArgs: func(int) []string {
			args := []string{"--reap-interval", chaosReapInterval.String(), "--reap-grace", chaosReapGrace.String()}
			if slices.Contains(kinds, "freeze") {
				args = append(args, "--storage-timeout", chaosStorageTimeout.String())
			}
			return args
		},
		storage: func(e *env) (string, func(int) string) {
			if !usesStorage(kinds) && !glusterfs {
				return e.path("shared"), func(int) string { return e.path("shared") }
			}
			ch.storage = newChaosStorage(t, e, kinds, glusterfs)
			return ch.storage.shared, func(i int) string { return ch.storage.views[i] }
		},
	})
	var pool []*memLayer
	for i := range 5 {
		l, err := randomLayer(fmt.Sprintf("pool%d.bin", i), chaosLayer+int64(i)*4096)
		require.NoError(t, err)
		pool = append(pool, l)
	}
	for i, idx := range chaosImages {
		var layers []*memLayer
		for _, j := range idx {
			layers = append(layers, pool[j])
		}
		ch.imgs = append(ch.imgs, pushLayers(t, ch.c.reg, fmt.Sprintf("e2e/chaos%d", i), layers...))
	}
	for i, n := range ch.c.nodes {
		ch.nodes = append(ch.nodes, newChaosNode(n, i, links[i], rand.New(rand.NewPCG(seed+uint64(i)+1, seed^0x0b5))))
	}
	return ch
}

// run lets every node operate while faults are injected, for d.
func (ch *realChaos) run(d time.Duration) {
	ch.start = time.Now()
	for _, n := range ch.nodes {
		ch.wg.Add(1)
		go ch.operate(n)
	}
	deadline := ch.start.Add(d)
	for time.Now().Before(deadline) {
		ch.pause(time.Second, 5*time.Second)
		if !time.Now().Before(deadline) {
			break
		}
		ch.inject(ch.pick())
	}
	ch.stopNodes()
}

// pick draws the next fault's kind: on etcd, one of chaosHAFaults half of
// the time when the kinds mix them with others (the new faults are what
// TestChaosRealHA is for); else any kind.
func (ch *realChaos) pick() string {
	if ch.ha != nil {
		var ha, other []string
		for _, k := range ch.kinds {
			if slices.Contains(chaosHAFaults, k) {
				ha = append(ha, k)
			} else {
				other = append(other, k)
			}
		}
		if len(ha) > 0 && len(other) > 0 {
			if ch.rng.IntN(2) == 0 {
				return ha[ch.rng.IntN(len(ha))]
			}
			return other[ch.rng.IntN(len(other))]
		}
	}
	return ch.kinds[ch.rng.IntN(len(ch.kinds))]
}

// stopNodes stops the nodes' operations and waits for them (once).
func (ch *realChaos) stopNodes() {
	select {
	case <-ch.stop:
	default:
		close(ch.stop)
	}
	ch.wg.Wait()
}

// pause waits a random time in [lo, hi): the chaos's rhythm, not a
// synchronisation.
func (ch *realChaos) pause(lo, hi time.Duration) {
	time.Sleep(lo + time.Duration(ch.rng.Int64N(int64(hi-lo))))
}

// count adds one to an operation's tally.
func (ch *realChaos) count(what string) {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	ch.ops[what]++
}

// healError records something that did not heal or leaked at the end.
func (ch *realChaos) healError(format string, args ...any) {
	s := fmt.Sprintf(format, args...)
	ch.t.Errorf("chaos seed %d: %s", ch.seed, s)
	ch.mu.Lock()
	defer ch.mu.Unlock()
	ch.healErrs = append(ch.healErrs, s)
}

// summary prints the one summary line (also when the test stops early).
func (ch *realChaos) summary(d time.Duration) {
	ch.stopNodes()
	ch.mu.Lock()
	defer ch.mu.Unlock()
	total, checks := 0, 0
	ops := map[string]int{}
	for k, n := range ch.ops {
		if strings.HasPrefix(k, "check") {
			checks += n
			continue
		}
		ops[k] = n
		total += n
	}
	nfaults := 0
	for _, n := range ch.faults {
		nfaults += n
	}
	report(ch.t, "chaos (real processes, %s): seed %d, %v of faults; operations %d (%s); checks %d (skipped, node down: %d); faults %d (%s)%s; blobs read back %d (failed reads of intact blobs %d); lost = %d%s; heal/leak errors %d; without the coordinator (plugins' logs): %s",
		chaosModeName(ch.ha, ch.glusterfs), ch.seed, d, total, tally(ops), checks-ch.ops["check skipped (node unreachable)"], ch.ops["check skipped (node unreachable)"],
		nfaults, tally(ch.faults), failoverText(ch.failovers), ch.reads, ch.readErrors, len(ch.lost),
		blameText(ch.blame), len(ch.healErrs), cmp.Or(tally(ch.uncoordinated()), "none"))
	for _, l := range ch.lost {
		ch.t.Log("chaos lost: " + l)
	}
	if len(ch.lost) > 0 {
		ch.t.Errorf("chaos seed %d: %d blobs lost (listed by a node's containerd, gone from the shared dir); replay with %s=%d",
			ch.seed, len(ch.lost), envChaosSeed, ch.seed)
	}
}

// tally formats counts by name, sorted by name.
func tally(m map[string]int) string {
	var out []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		out = append(out, fmt.Sprintf("%s=%d", k, m[k]))
	}
	return strings.Join(out, " ")
}

func blameText(m map[string]int) string {
	if len(m) == 0 {
		return ""
	}
	return " (faults in the minute before each loss: " + tally(m) + ")"
}
