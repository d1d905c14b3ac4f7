package scale

import (
	"fmt"
	"time"

	"github.com/opencontainers/go-digest"
)

// RestartSize is a restart scenario's fleet: Nodes nodes with Refs
// references each.
type RestartSize struct{ Nodes, Refs int }

func (s RestartSize) String() string { return fmt.Sprintf("%d×%d", s.Nodes, s.Refs) }

// RestartResult is one restart: the coordinator is killed and started
// again on its data directory while N nodes with R references each run.
type RestartResult struct {
	RestartSize
	// Setup is how long the first syncs of all journals took, SetupCPU
	// the coordinator's CPU until then (the process's whole life).
	Setup, SetupCPU time.Duration
	// Down is from the kill until the new process answers /healthz.
	Down time.Duration
	// Resync is from the new process answering until the last node is
	// synced in its epoch; Unsynced nodes were not by the deadline.
	Resync   time.Duration
	Unsynced int
	// Usage is from the kill until the last node synced; CPU, PeakRSS
	// and PeakFiles are the new process's; MaxGap includes the
	// coordinator's downtime.
	Usage
}

// journalOf returns node i's journal: refs consecutive digests (wrapping)
// of a pool of 2·refs shared by all nodes, from a start that differs per
// node, so every blob is referenced by about half the nodes.
func journalOf(pool []digest.Digest, refs int) func(i int) []digest.Digest {
	return func(i int) []digest.Digest {
		j := make([]digest.Digest, refs)
		start := (i * 7919) % len(pool)
		for k := range j {
			j[k] = pool[(start+k)%len(pool)]
		}
		return j
	}
}

// restart runs one restart scenario.
func restart(cfg Config, size RestartSize) (RestartResult, error) {
	res := RestartResult{RestartSize: size}
	pool := make([]digest.Digest, 2*size.Refs)
	salt := randomHex(8)
	for k := range pool {
		pool[k] = digest.FromString(fmt.Sprintf("scale-ref-%s-%d", salt, k))
	}
	start := time.Now()
	env, err := setUp(cfg, size.Nodes, journalOf(pool, size.Refs))
	if err != nil {
		return res, err
	}
	defer env.tearDown()
	res.Setup = time.Since(start)
	if res.SetupCPU, err = cpuTime(env.coord.pid()); err != nil {
		return res, err
	}
	m := env.begin()
	killed := time.Now()
	env.coord.kill()
	if err := env.coord.start(); err != nil {
		return res, fmt.Errorf("restart: %w", err)
	}
	answering := time.Now()
	res.Down = answering.Sub(killed)
	// Measure the new process from its start: its CPU so far is all
	// re-sync work (opening the database included).
	m.cpu0 = 0
	epoch, err := clusterEpoch(env.coord.url())
	if err != nil {
		return res, err
	}
	if epoch == env.epoch {
		return res, fmt.Errorf("restart: the epoch stayed %d", epoch)
	}
	last, unsynced := waitSynced(env.fleet.nodes, epoch, cfg.Deadline)
	env.end(m)
	res.Unsynced = unsynced
	if unsynced == 0 {
		res.Resync = max(0, last.Sub(answering))
	} else {
		res.Resync = time.Since(answering)
	}
	res.Usage = m.Usage
	return res, m.err
}
