package scale

import (
	"fmt"
	"syscall"
	"time"
)

// Results are a Run's results, in the order run.
type Results struct {
	Rollout []RolloutResult
	Steady  []SteadyResult
	Restart []RestartResult
	// Failed lists the scenarios that could not be run (set up) and why.
	Failed []string
	// Nofile is the descriptor limit the run had (the coordinator
	// inherits it).
	Nofile uint64
}

// Run runs cfg's scenarios one after the other, each against a new
// coordinator. A scenario that cannot be run (its fleet not set up in
// time) is listed in Failed and the run goes on.
func Run(cfg Config) (*Results, error) {
	progress := cfg.Progress
	if progress == nil {
		progress = func(string) {}
	}
	res := &Results{}
	var err error
	if res.Nofile, err = raiseNofile(); err != nil {
		return res, err
	}
	for _, n := range cfg.Rollout {
		progress(fmt.Sprintf("scale: rollout, %d nodes × %d blobs", n, cfg.Blobs))
		r, err := rollout(cfg, n)
		if err != nil {
			res.Failed = append(res.Failed, fmt.Sprintf("rollout %d: %v", n, err))
			progress("scale: " + res.Failed[len(res.Failed)-1])
			continue
		}
		res.Rollout = append(res.Rollout, r)
		progress(fmt.Sprintf("scale: rollout %d: wall %s, %d nodes unfinished, done p99 %s, wake p99 %s, CPU/node-blob %s", n,
			r.Wall.Round(time.Millisecond), r.Unfinished, r.DoneP99.Round(time.Millisecond), r.WakeP99.Round(time.Millisecond), r.CPUPerNodeBlob()))
	}
	for _, n := range cfg.Steady {
		progress(fmt.Sprintf("scale: steady, %d nodes for %s", n, cfg.SteadyFor))
		r, err := steady(cfg, n)
		if err != nil {
			res.Failed = append(res.Failed, fmt.Sprintf("steady %d: %v", n, err))
			progress("scale: " + res.Failed[len(res.Failed)-1])
			continue
		}
		res.Steady = append(res.Steady, r)
		progress(fmt.Sprintf("scale: steady %d: %.1f%% of a core", n, 100*r.CoreShare()))
	}
	for _, s := range cfg.Restart {
		progress(fmt.Sprintf("scale: restart, %s references", s))
		r, err := restart(cfg, s)
		if err != nil {
			res.Failed = append(res.Failed, fmt.Sprintf("restart %v: %v", s, err))
			progress("scale: " + res.Failed[len(res.Failed)-1])
			continue
		}
		res.Restart = append(res.Restart, r)
		progress(fmt.Sprintf("scale: restart %s: setup %s, all synced %s after answering (%d not), longest without a session answer %s", s,
			r.Setup.Round(time.Millisecond), r.Resync.Round(time.Millisecond), r.Unsynced, r.MaxGap.Round(time.Millisecond)))
	}
	return res, nil
}

// raiseNofile raises the soft descriptor limit to the hard one: each node
// holds a few connections, and the coordinator (a child) inherits it.
func raiseNofile() (uint64, error) {
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		return 0, err
	}
	l.Cur = l.Max
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		return 0, err
	}
	return l.Cur, nil
}

// Violations lists the invariants the results break: every scenario run,
// every blob downloaded exactly once, every node done, every node synced
// again.
func (r *Results) Violations() []string {
	out := append([]string(nil), r.Failed...)
	for _, x := range r.Rollout {
		for j, d := range x.Downloads {
			if d != 1 {
				out = append(out, fmt.Sprintf("rollout %d: blob %d downloaded %d times", x.Nodes, j, d))
			}
		}
		if x.Unfinished > 0 {
			out = append(out, fmt.Sprintf("rollout %d: %d nodes did not finish", x.Nodes, x.Unfinished))
		}
	}
	for _, x := range r.Restart {
		if x.Unsynced > 0 {
			out = append(out, fmt.Sprintf("restart %s: %d nodes not synced again", x.RestartSize, x.Unsynced))
		}
	}
	return out
}
