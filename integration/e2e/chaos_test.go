package e2e

import (
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
)

// TestChaosReal is the real-process chaos test (issue 23): a stand-alone
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
//	SHAREDCONTENT_E2E_CHAOS_FAULTS    comma-separated fault kinds (default: all of chaosFaults)
//
// The seed fixes every random choice (each node's operations, the faults,
// their targets and lengths); the timing between the actors is the
// machine's, so a replay runs the same sequences, not the same
// interleaving.
func TestChaosReal(t *testing.T) {
	needSharedcontent(t)
	duration := chaosDefaultDuration
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
	kinds, err := chaosKinds(os.Getenv(envChaosFaults))
	require.NoError(t, err, "%s", envChaosFaults)
	t.Logf("chaos: seed %d, %v of faults (%s), kinds %s; replay: %s=%d %s=%s",
		seed, duration, envChaosDuration, strings.Join(kinds, ","), envChaosSeed, seed, envChaosFaults, strings.Join(kinds, ","))

	ch := newRealChaos(t, seed, kinds)
	defer ch.summary(duration)
	ch.run(duration)
	ch.heal()
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
	// chaosDefaultDuration is the short run of `make e2e` (and CI).
	chaosDefaultDuration = 90 * time.Second
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

// chaosKinds parses SHAREDCONTENT_E2E_CHAOS_FAULTS: empty is every kind.
func chaosKinds(s string) ([]string, error) {
	if strings.TrimSpace(s) == "" {
		return slices.Clone(chaosFaults), nil
	}
	var out []string
	for _, k := range strings.Split(s, ",") {
		k = strings.TrimSpace(k)
		if !slices.Contains(chaosFaults, k) {
			return nil, fmt.Errorf("unknown fault kind %q; known: %s", k, strings.Join(chaosFaults, ","))
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
	imgs  []testImage
	nodes []*chaosNode
	start time.Time

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

// newRealChaos starts the registry, the coordinator and three nodes, and
// pushes the images.
func newRealChaos(t *testing.T, seed uint64, kinds []string) *realChaos {
	t.Helper()
	ch := &realChaos{t: t, seed: seed, rng: rand.New(rand.NewPCG(seed, seed^0xc4a05)), kinds: kinds,
		stop: make(chan struct{}), ops: map[string]int{}, faults: map[string]int{},
		lostSeen: map[string]bool{}, blame: map[string]int{}}
	proxies := make([]*netProxy, 3)
	ch.c = newFaultCluster(t, faultOpts{
		lockServerArgs: []string{"--session-ttl", chaosSessionTTL.String(), "--node-expiry", chaosNodeExpiry.String(),
			"--lease-ttl", chaosLeaseTTL.String(), "--reap-grace", chaosReapGrace.String()},
		lockURL: func(ls *lockServer, i int) string {
			proxies[i] = startNetProxy(t, ls.addr)
			return proxies[i].url()
		},
		pluginArgs: func(int) []string {
			return []string{"--reap-interval", chaosReapInterval.String(), "--reap-grace", chaosReapGrace.String()}
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
		ch.nodes = append(ch.nodes, newChaosNode(n, proxies[i], rand.New(rand.NewPCG(seed+uint64(i)+1, seed^0x0b5))))
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
		ch.inject(ch.kinds[ch.rng.IntN(len(ch.kinds))])
	}
	ch.stopNodes()
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
	report(ch.t, "chaos (real processes): seed %d, %v of faults; operations %d (%s); checks %d (skipped, node down: %d); faults %d (%s); blobs read back %d (failed reads of intact blobs %d); lost = %d%s; heal/leak errors %d",
		ch.seed, d, total, tally(ops), checks-ch.ops["check skipped (node unreachable)"], ch.ops["check skipped (node unreachable)"],
		nfaults, tally(ch.faults), ch.reads, ch.readErrors, len(ch.lost),
		blameText(ch.blame), len(ch.healErrs))
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
