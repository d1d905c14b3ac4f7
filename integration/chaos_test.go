package integration

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containerd/errdefs"
	"github.com/stretchr/testify/require"

	"github.com/sharedcontent/sharedcontent/internal/testutil/registry"
)

// The randomized fault test of the faults of docs/design.md §8. Nodes pull and remove random
// images and run containerd's GC, all at once, while the coordinator is
// restarted, stopped, wiped (and later adopted), nodes are cut off and
// reconnected, and plugins restart. After every step, every blob that any
// node's containerd metadata records must read back intact from the
// shared directory.
//
//	SHAREDCONTENT_CHAOS_SEED   the seed (default: the time); printed
//	SHAREDCONTENT_CHAOS_STEPS  steps to run (default chaosSteps; make chaos: 500)
const (
	chaosSteps  = 60
	chaosNodes  = 4
	chaosImages = 6
)

func envInt(t *testing.T, name string, def uint64) uint64 {
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	v, err := strconv.ParseUint(s, 10, 64)
	require.NoError(t, err, "%s", name)
	return v
}

// chaos is the test's model of the cluster.
type chaos struct {
	t      *testing.T
	e      *faultEnv
	seed   uint64
	rng    *rand.Rand
	imgs   []registry.Image
	nodes  []*faultNode
	has    []map[string]bool // images each node records
	wiped  bool              // the coordinator lost its data and is not adopted yet
	stats  map[string]int
	broken []string // invariant violations
}

func TestChaos(t *testing.T) {
	seed := envInt(t, "SHAREDCONTENT_CHAOS_SEED", uint64(time.Now().UnixNano()))
	steps := int(envInt(t, "SHAREDCONTENT_CHAOS_STEPS", chaosSteps))
	t.Logf("chaos seed %d, %d steps (SHAREDCONTENT_CHAOS_SEED=%d reproduces the sequence of actions)", seed, steps, seed)

	c := &chaos{t: t, e: newFaultEnv(t, faultConfig()), seed: seed, rng: rand.New(rand.NewPCG(seed, seed^0x5eed)),
		stats: map[string]int{}}
	for i := range chaosImages {
		c.imgs = append(c.imgs, c.e.push(fmt.Sprintf("chaos%d", i)))
	}
	for i := range chaosNodes {
		c.nodes = append(c.nodes, c.e.addNode(fmt.Sprintf("node-%d", i+1)))
		c.has = append(c.has, map[string]bool{})
	}
	start := time.Now()
	for step := 1; step <= steps; step++ {
		c.step(step)
		if len(c.broken) > 0 && step < steps {
			t.Logf("stopping after step %d: the invariant is broken", step)
			steps = step
			break
		}
	}
	chaosTime := time.Since(start)
	c.heal()
	c.checkAll("after healing")
	c.cleanup()
	t.Logf("chaos seed %d: %d steps in %s, %d violations; actions: %v",
		seed, steps, chaosTime.Round(time.Millisecond), len(c.broken), c.stats)
	require.Empty(t, c.broken, "chaos seed %d: blobs recorded in containerd's metadata that cannot be read back", seed)
}

// step runs one step: node operations at once, with at most one fault
// injected while they run, then the invariant check.
func (c *chaos) step(step int) {
	t := c.t
	fault, restart := c.pickFault()
	type op struct {
		node *faultNode
		i    int
		what string
		img  registry.Image
	}
	var ops []op
	for i, n := range c.nodes {
		if i == restart || c.rng.Float64() > 0.7 {
			continue
		}
		o := op{node: n, i: i, img: c.imgs[c.rng.IntN(len(c.imgs))]}
		switch r := c.rng.Float64(); {
		case r < 0.25:
			o.what = "gc"
		case r < 0.45 && len(c.has[i]) > 0:
			o.what = "rm"
			names := slices.Sorted(mapKeys(c.has[i]))
			o.img = c.imageNamed(names[c.rng.IntN(len(names))])
		default:
			o.what = "pull"
		}
		ops = append(ops, o)
	}
	var desc []string
	for _, o := range ops {
		desc = append(desc, fmt.Sprintf("%s %s %s", o.node.id, o.what, imageShort(o.img)))
	}
	t.Logf("step %d: fault %q; %s", step, fault, strings.Join(desc, ", "))

	errs := make([]error, len(ops))
	var wg sync.WaitGroup
	for k, o := range ops {
		wg.Go(func() {
			ctx := nsContext()
			switch o.what {
			case "pull":
				errs[k] = o.node.pullImage(45*time.Second, o.img)
			case "rm":
				errs[k] = o.node.RemoveImage(ctx, o.img.Ref)
			case "gc":
				cctx, cancel := context.WithTimeout(ctx, 45*time.Second)
				errs[k] = o.node.collect(cctx)
				cancel()
			}
		})
	}
	c.inject(fault, restart)
	wg.Wait()
	for k, o := range ops {
		c.stats[o.what]++
		err := errs[k]
		switch {
		case err == nil && o.what == "pull":
			c.has[o.i][o.img.Ref] = true
		case err == nil && o.what == "rm", o.what == "rm" && errdefs.IsNotFound(err):
			delete(c.has[o.i], o.img.Ref)
		case err != nil && o.what == "pull":
			// Not a violation: whatever the metadata records is checked.
			c.stats["pull failed"]++
			t.Logf("step %d: %s pull %s: %v", step, o.node.id, imageShort(o.img), err)
		case err != nil:
			c.violation(fmt.Sprintf("step %d: %s %s: %v", step, o.node.id, o.what, err))
		}
	}
	c.checkAll(fmt.Sprintf("step %d", step))
}

func mapKeys(m map[string]bool) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

func (c *chaos) imageNamed(ref string) registry.Image {
	for _, img := range c.imgs {
		if img.Ref == ref {
			return img
		}
	}
	c.t.Fatalf("no image %s", ref)
	return registry.Image{}
}

func imageShort(img registry.Image) string {
	s := img.Ref[strings.LastIndexByte(img.Ref, '/')+1:]
	return strings.TrimSuffix(s, ":v1")
}

// pickFault picks this step's fault ("" for none) and the node whose
// plugin it restarts (-1 for none).
func (c *chaos) pickFault() (string, int) {
	if c.rng.Float64() > 0.5 {
		return "", -1
	}
	var cands []string
	for _, n := range c.nodes {
		if n.proxy.IsCut() {
			cands = append(cands, "reconnect "+n.id, "reconnect "+n.id)
		} else {
			cands = append(cands, "cut "+n.id)
		}
		cands = append(cands, "restart plugin "+n.id)
	}
	if c.e.coord.Running() {
		cands = append(cands, "restart coordinator", "restart coordinator", "stop coordinator", "wipe coordinator")
		if c.wiped {
			cands = append(cands, "adopt", "adopt", "adopt")
		}
	} else {
		cands = append(cands, "start coordinator", "start coordinator", "start coordinator", "wipe coordinator")
	}
	f := cands[c.rng.IntN(len(cands))]
	if id, ok := strings.CutPrefix(f, "restart plugin "); ok {
		return f, c.nodeIndex(id)
	}
	return f, -1
}

func (c *chaos) nodeIndex(id string) int {
	for i, n := range c.nodes {
		if n.id == id {
			return i
		}
	}
	return -1
}

// inject applies a fault (in the test's goroutine, while the step's node
// operations run).
func (c *chaos) inject(fault string, restart int) {
	if fault == "" {
		return
	}
	kind := fault
	if i := strings.Index(fault, " node-"); i >= 0 {
		kind = fault[:i]
	}
	c.stats[kind]++
	switch {
	case strings.HasPrefix(fault, "cut "):
		c.nodes[c.nodeIndex(strings.TrimPrefix(fault, "cut "))].proxy.Cut()
	case strings.HasPrefix(fault, "reconnect "):
		c.nodes[c.nodeIndex(strings.TrimPrefix(fault, "reconnect "))].proxy.Reconnect()
	case restart >= 0:
		c.restartPlugin(c.nodes[restart])
	case fault == "restart coordinator":
		c.e.coord.Restart()
	case fault == "stop coordinator":
		c.e.coord.Stop()
	case fault == "start coordinator":
		c.e.coord.Start()
	case fault == "wipe coordinator":
		c.e.coord.Wipe()
		c.wiped = true
	case fault == "adopt":
		c.adopt()
	default:
		c.t.Fatalf("unknown fault %q", fault)
	}
}

func (c *chaos) adopt() {
	_, err := c.e.coord.Adopt(context.Background(), c.e.root)
	if err != nil {
		c.violation(fmt.Sprintf("adopting the root: %v", err))
		return
	}
	c.wiped = false
}

// restartPlugin stops and starts a node's plugin with its state. It
// refuses to start only while the coordinator is of another cluster (a
// wiped one, running, not adopted): then the operator adopts, and it
// starts.
func (c *chaos) restartPlugin(n *faultNode) {
	n.Close()
	err := n.Open()
	if err != nil && isWrongCluster(err) && c.wiped && c.e.coord.Running() {
		c.stats["refused to start (adopt)"]++
		c.adopt()
		err = n.Open()
	}
	if err != nil {
		c.t.Fatalf("chaos seed %d: %s does not start again: %v", c.seed, n.id, err)
	}
}

func (c *chaos) violation(s string) {
	s = fmt.Sprintf("chaos seed %d: %s", c.seed, s)
	c.broken = append(c.broken, s)
	c.t.Error(s)
}

// checkAll checks the invariant on every node.
func (c *chaos) checkAll(when string) {
	ctx := nsContext()
	for _, n := range c.nodes {
		for _, bad := range unreadable(ctx, n.Node) {
			c.violation(when + ": " + bad)
		}
	}
}

// heal ends every fault: the coordinator runs (adopted), every node is
// connected and synced; then every node collects once.
func (c *chaos) heal() {
	t := c.t
	for _, n := range c.nodes {
		n.proxy.Reconnect()
	}
	if !c.e.coord.Running() {
		c.e.coord.Start()
	}
	if c.wiped {
		c.adopt()
	}
	var ids []string
	for _, n := range c.nodes {
		ids = append(ids, n.id)
	}
	c.e.coord.waitSynced(t, ids...)
	for _, n := range c.nodes {
		require.NoError(t, n.collect(nsContext()), "chaos seed %d", c.seed)
	}
}

// cleanup checks that nothing is kept for ever: once every node has
// removed its images, the nodes' GCs remove every blob of them.
func (c *chaos) cleanup() {
	t := c.t
	ctx := nsContext()
	for i, n := range c.nodes {
		for ref := range c.has[i] {
			require.NoError(t, n.RemoveImage(ctx, ref))
		}
	}
	left := func() []string {
		var out []string
		for _, img := range c.imgs {
			for _, d := range img.Blobs() {
				if _, err := os.Stat(blobPath(c.e.root, d)); err == nil {
					out = append(out, d)
				}
			}
		}
		return out
	}
	// Collect on every node until nothing is left: a pull lock abandoned
	// by a cut-off or restarted node keeps its blob until its lease
	// expires, and a GC offers a blob only when it runs.
	var remaining []string
	cleaned := assertEventually(30*time.Second, 200*time.Millisecond, func() bool {
		for _, n := range c.nodes {
			if err := n.collect(ctx); err != nil {
				return false
			}
		}
		remaining = left()
		return len(remaining) == 0
	})
	if cleaned {
		return
	}
	t.Errorf("chaos seed %d: after every node removed its images and collected, %d blobs are left: %v",
		c.seed, len(remaining), remaining)
}

// assertEventually polls cond every tick until it holds (true) or within
// has passed (false).
func assertEventually(within, tick time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(within)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(tick)
	}
}
