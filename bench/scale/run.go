package scale

import (
	"fmt"
	"strings"
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
	if res.Nofile, err = raiseNofile(nofileFor(cfg.largest(), cfg.conns())); err != nil {
		return res, err
	}
	fail := func(scenario string, err error) {
		res.Failed = append(res.Failed, fmt.Sprintf("%s: %v", scenario, err))
		progress("scale: " + res.Failed[len(res.Failed)-1])
	}
	for i, n := range cfg.Rollout {
		rc, conns := cfg.sized(n, res.Nofile)
		if err := fits(n, conns, res.Nofile); err != nil {
			fail(fmt.Sprintf("rollout %d", n), err)
			continue
		}
		if i < len(cfg.OldNodes) {
			rc.olderNodes = min(n, cfg.OldNodes[i])
		}
		for _, skipRef := range cfg.skipRefs() {
			progress(fmt.Sprintf("scale: rollout, %d nodes (%d older) × %d blobs, skip adds ref %s, %d short connections a node at most", n, rc.olderNodes, cfg.Blobs, onOff(skipRef), conns))
			r, err := rollout(rc, n, skipRef)
			if err != nil {
				fail(fmt.Sprintf("rollout %d", n), err)
				continue
			}
			res.Rollout = append(res.Rollout, r)
			progressRollout(progress, r)
		}
	}
	for _, n := range cfg.Steady {
		sc, conns := cfg.sized(n, res.Nofile)
		if err := fits(n, conns, res.Nofile); err != nil {
			fail(fmt.Sprintf("steady %d", n), err)
			continue
		}
		progress(fmt.Sprintf("scale: steady, %d nodes for %s", n, cfg.SteadyFor))
		r, err := steady(sc, n)
		if err != nil {
			fail(fmt.Sprintf("steady %d", n), err)
			continue
		}
		res.Steady = append(res.Steady, r)
		progress(fmt.Sprintf("scale: steady %d: %.1f%% of a core", n, 100*r.CoreShare()))
	}
	for _, s := range cfg.Restart {
		rc, conns := cfg.sized(s.Nodes, res.Nofile)
		if err := fits(s.Nodes, conns, res.Nofile); err != nil {
			fail(fmt.Sprintf("restart %v", s), err)
			continue
		}
		progress(fmt.Sprintf("scale: restart, %s references", s))
		r, err := restart(rc, s)
		if err != nil {
			fail(fmt.Sprintf("restart %v", s), err)
			continue
		}
		res.Restart = append(res.Restart, r)
		progress(fmt.Sprintf("scale: restart %s: setup %s, all synced %s after answering (%d not), longest without a session answer %s", s,
			r.Setup.Round(time.Millisecond), r.Resync.Round(time.Millisecond), r.Unsynced, r.MaxGap.Round(time.Millisecond)))
	}
	return res, nil
}

// conns is the most connections a node holds besides its event stream.
// With lockclient's pool (ShortConns 0) a node opens one for each of its
// requests in flight: one per blob it fetches at once (each fetch makes one
// call at a time), its session loop's, and a holder's unlock and lease
// keepalive.
func (cfg Config) conns() int {
	switch {
	case cfg.ShortConns == 0:
		return cfg.Parallel + 3
	case cfg.SessionConn:
		return cfg.ShortConns + 1
	}
	return cfg.ShortConns
}

// sized is cfg for a fleet of n nodes under the descriptor limit nofile,
// with the connections each node may hold: lockclient's pool is bounded
// by what the limit leaves per node (at least one), as a coordinator
// whose limit is too low for its nodes' pools would bound them
// (docs/design.md §10.8).
func (cfg Config) sized(n int, nofile uint64) (Config, int) {
	conns := cfg.conns()
	if cfg.ShortConns == 0 {
		conns = max(1, min(conns, mostConns(n, nofile)))
		cfg.poolConns = conns
	}
	return cfg, conns
}

// mostConns is the most connections each of n nodes may hold besides its
// stream under the descriptor limit nofile (fits).
func mostConns(n int, nofile uint64) int {
	coordinator := (int(nofile*3/4)-spareFiles)/n - 1
	own := (int(nofile)-spareFiles)/n - 2
	return min(coordinator, own)
}

// skipRefs is cfg.SkipRef, or the default alone (off).
func (cfg Config) skipRefs() []bool {
	if len(cfg.SkipRef) == 0 {
		return []bool{false}
	}
	return cfg.SkipRef
}

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// raiseNofile raises the soft descriptor limit to the hard one, and the
// hard one to want where it is lower and this process may (root:
// CAP_SYS_RESOURCE, up to fs.nr_open): each node holds a few connections
// (fits), and the coordinator (a child) inherits the limit.
func raiseNofile(want uint64) (uint64, error) {
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		return 0, err
	}
	if l.Max < want && syscall.Setrlimit(syscall.RLIMIT_NOFILE, &syscall.Rlimit{Cur: want, Max: want}) == nil {
		return want, nil
	}
	// Not allowed (or not needed): the hard limit stands, and fits says
	// which sizes it holds.
	l.Cur = l.Max
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		return 0, err
	}
	return l.Cur, nil
}

// nofileFor is the descriptor limit n nodes with shortConns connections
// each besides their stream need (fits).
func nofileFor(n, shortConns int) uint64 {
	connsPerNode := uint64(shortConns + 1)
	coordinator := (uint64(n)*connsPerNode + spareFiles) * 4 / 3
	own := uint64(n)*(connsPerNode+1) + spareFiles
	return max(coordinator+1, own)
}

// largest is the largest fleet of cfg's scenarios.
func (cfg Config) largest() int {
	n := 0
	for _, x := range cfg.Rollout {
		n = max(n, x)
	}
	for _, x := range cfg.Steady {
		n = max(n, x)
	}
	for _, x := range cfg.Restart {
		n = max(n, x.Nodes)
	}
	return n
}

// Violations lists the invariants the results break: every scenario run,
// every blob downloaded exactly once, no write or reference without the
// coordinator, every holder's unlock answered, every node done, every
// node synced again.
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
		if u := x.Acts.Uncoordinated(); u > 0 {
			out = append(out, fmt.Sprintf("rollout %d: %.0f writes or references went ahead without the coordinator (the first call without an answer: %s)", x.Nodes, u, x.Acts.FirstFailure))
		}
		if x.UnlockFailed > 0 {
			out = append(out, fmt.Sprintf("rollout %d: %d holders' unlocks failed, the first: %s", x.Nodes, x.UnlockFailed, x.UnlockErr))
		}
	}
	for _, x := range r.Restart {
		if x.Unsynced > 0 {
			out = append(out, fmt.Sprintf("restart %s: %d nodes not synced again", x.RestartSize, x.Unsynced))
		}
	}
	return out
}

// Descriptors: each simulated node holds up to Config.conns connections
// for its short requests and one for its event stream, a
// descriptor each in this process and in the coordinator; in this process
// a rollout's node holds its journal (a bbolt file) open too.
const (
	// spareFiles are the descriptors either process needs besides the
	// nodes' connections: listener, database, logs, the benchmark's own
	// requests, and connections being closed and opened again.
	spareFiles = 512
)

// fits reports, with a message naming the limit, when n nodes with
// shortConns connections each besides their stream cannot fit under the
// descriptor limit nofile: in the coordinator, which inherits it and
// serves connections up to three quarters of it (--max-conns' default,
// httpserver.ConnLimits), and in this process, where each node holds its
// journal open besides its connections.
func fits(n, shortConns int, nofile uint64) error {
	connsPerNode := shortConns + 1
	need := uint64(n*connsPerNode + spareFiles)
	if serves := nofile * 3 / 4; need > serves {
		return fmt.Errorf("%d nodes need about %d descriptors (%d connections each, plus %d), more than the coordinator serves under the descriptor limit %d (RLIMIT_NOFILE, ulimit -Hn; --max-conns defaults to three quarters of it, %d): at most %d nodes fit; raise the hard limit (the benchmark raises it itself where it may: CAP_SYS_RESOURCE)",
			n, need, connsPerNode, spareFiles, nofile, serves, (serves-spareFiles)/uint64(connsPerNode))
	}
	if own := uint64(n*(connsPerNode+1) + spareFiles); own > nofile {
		return fmt.Errorf("%d nodes need about %d descriptors in the benchmark's process (%d connections and a journal each, plus %d), more than the descriptor limit %d (RLIMIT_NOFILE, ulimit -Hn): at most %d nodes fit; raise the hard limit (the benchmark raises it itself where it may: CAP_SYS_RESOURCE)",
			n, own, connsPerNode, spareFiles, nofile, (nofile-spareFiles)/uint64(connsPerNode+1))
	}
	return nil
}

// progressRollout tells progress what rollout r measured.
func progressRollout(progress func(string), r RolloutResult) {
	progress(fmt.Sprintf("scale: rollout %d (skip adds ref %s): wall %s, %d nodes unfinished, done p99 %s, wake p50/p99 %s/%s (%d; on the stream %s/%s (%d), by status %s/%s (%d)), late p50/p99 %s/%s (%d), unlock %s/%s (%d sent while their node's requests were in flight), fan-out %s/%s, dispatch %s/%s, time-outs %d, calls without an answer %d, writers retried %d, uncoordinated %.0f, duplicate downloads %d, unlocks failed %d, CPU/node-blob %s; the stores: %s; a call without an answer: %s%s", r.Nodes, onOff(r.SkipRef),
		r.Wall.Round(time.Millisecond), r.Unfinished, r.DoneP99.Round(time.Millisecond), r.WakeP50.Round(time.Millisecond), r.WakeP99.Round(time.Millisecond), r.WakeSamples,
		r.StreamedP50.Round(time.Millisecond), r.StreamedP99.Round(time.Millisecond), r.StreamedSamples, r.CheckedP50.Round(time.Millisecond), r.CheckedP99.Round(time.Millisecond), r.CheckedSamples,
		r.LateP50.Round(time.Millisecond), r.LateP99.Round(time.Millisecond), r.LateSamples,
		r.UnlockP50.Round(time.Millisecond), r.UnlockP99.Round(time.Millisecond), r.UnlockBehind, r.FanoutP50.Round(time.Millisecond), r.FanoutP99.Round(time.Millisecond),
		r.DispatchP50.Round(time.Millisecond), r.DispatchP99.Round(time.Millisecond), r.Errors.Timeouts, r.Acts.FailedCalls, r.Acts.WriterRetries, r.Acts.Uncoordinated(),
		r.Duplicates(), r.UnlockFailed, r.CPUPerNodeBlob(), r.Acts, or(r.Acts.FirstFailure, "none"), stuckLine(r)))
}

// stuckLine says what the fetches that never finished met, if any.
func stuckLine(r RolloutResult) string {
	if len(r.StuckLast) == 0 {
		return ""
	}
	return fmt.Sprintf("; unfinished fetches, first errors: %s; last errors: %s", strings.Join(r.StuckFirst, "; "), strings.Join(r.StuckLast, "; "))
}
