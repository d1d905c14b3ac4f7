package scale

import (
	"fmt"
	"slices"
	"time"
)

// Targets of docs/design.md §10, measured with the simulator on
// the same cores as the coordinator.
const (
	targetDoneAfterDL     = 20 * time.Second
	targetWakeP99         = time.Second
	targetCPUPerNodeBlob  = 300 * time.Microsecond
	targetCPUGrowth       = 1.2 // largest N against smallest
	targetResync          = 10 * time.Second
	targetResyncBytes     = 1000 // per node
	targetSteadyCoreShare = 0.15
	targetSteadyRSS       = 250e6
	// docs/design.md §10.9: a fleet's first syncs, and the memory of a
	// coordinator restarted on them.
	targetFirstSyncs    = 120 * time.Second
	targetRestartRSS    = 600e6
	targetBulkNodes     = 1000
	targetBulkRefs      = 10000
	targetOlderCPU      = 1.5 // older nodes' CPU per node-blob against current ones'
	targetOlderMinNodes = 1000
)

// targetRollout reports whether a rollout of n current nodes has the
// rollout targets (docs/design.md §10): 2,600 and 5,000.
func targetRollout(n int) bool { return n == 2600 || n == 5000 }

// Verdict is one target, met or not, with the figure.
type Verdict struct {
	Name   string
	Met    bool
	Detail string
}

// Targets checks the results against docs/design.md §10's targets, where the run
// has the figure.
func (r *Results) Targets() []Verdict {
	var out []Verdict
	var current []RolloutResult
	for _, x := range r.Rollout {
		if x.OldNodes == 0 {
			current = append(current, x)
		}
		if x.OldNodes > 0 || !targetRollout(x.Nodes) {
			continue
		}
		after := x.Wall - x.Downloaded
		out = append(out,
			Verdict{fmt.Sprintf("rollout N=%d: every node done ≤ %s after the last download", x.Nodes, targetDoneAfterDL), x.Unfinished == 0 && after <= targetDoneAfterDL,
				fmt.Sprintf("%s (last download done %s after the start; %d nodes unfinished)", dur(after), dur(x.Downloaded), x.Unfinished)},
			Verdict{fmt.Sprintf("rollout N=%d: each blob downloaded once", x.Nodes), x.Unfinished == 0 && x.Duplicates() == 0,
				fmt.Sprintf("%d duplicate downloads, %d nodes unfinished", x.Duplicates(), x.Unfinished)},
			Verdict{fmt.Sprintf("rollout N=%d: wake-up p99 ≤ %s", x.Nodes, targetWakeP99), x.WakeP99 <= targetWakeP99, dur(x.WakeP99)},
			Verdict{fmt.Sprintf("rollout N=%d: 0 client time-outs", x.Nodes), x.Errors.Timeouts == 0, fmt.Sprint(x.Errors.Timeouts)},
			Verdict{fmt.Sprintf("rollout N=%d: coordinator CPU per node-blob ≤ %s", x.Nodes, dur(targetCPUPerNodeBlob)), x.CPUPerNodeBlob() <= targetCPUPerNodeBlob, dur(x.CPUPerNodeBlob())},
		)
	}
	if n := len(current); n > 1 {
		lo, hi := current[0], current[n-1]
		g := float64(hi.CPUPerNodeBlob()) / float64(max(1, lo.CPUPerNodeBlob()))
		out = append(out, Verdict{fmt.Sprintf("rollout: CPU per node-blob at N=%d ≤ %.1f× N=%d", hi.Nodes, targetCPUGrowth, lo.Nodes), g <= targetCPUGrowth,
			fmt.Sprintf("%.2f× (%s vs %s)", g, dur(hi.CPUPerNodeBlob()), dur(lo.CPUPerNodeBlob()))})
	}
	out = append(out, r.olderTargets(current)...)
	for _, x := range r.Restart {
		perNode := x.BytesSent / int64(max(1, x.Nodes))
		if x.Nodes == targetBulkNodes && x.Refs == targetBulkRefs {
			out = append(out,
				Verdict{fmt.Sprintf("first syncs %s ≤ %s", x.RestartSize, targetFirstSyncs), x.Setup <= targetFirstSyncs, dur(x.Setup)},
				Verdict{fmt.Sprintf("restart %s: peak RSS of the restarted coordinator ≤ %s", x.RestartSize, mb(targetRestartRSS)), x.PeakRSS <= targetRestartRSS, mb(x.PeakRSS)},
			)
		}
		out = append(out,
			Verdict{fmt.Sprintf("restart %s: all synced ≤ %s after answering", x.RestartSize, targetResync), x.Unsynced == 0 && x.Resync <= targetResync,
				fmt.Sprintf("%s (%d not synced)", dur(x.Resync), x.Unsynced)},
			Verdict{fmt.Sprintf("restart %s: ≤ %d B sent per node", x.RestartSize, targetResyncBytes), perNode <= targetResyncBytes, fmt.Sprintf("%d B", perNode)},
			Verdict{fmt.Sprintf("restart %s: no node without a session answer longer than its TTL (%s)", x.RestartSize, defaultTTL), x.MaxGap <= defaultTTL, dur(x.MaxGap)},
		)
	}
	for _, x := range r.Steady {
		out = append(out,
			Verdict{fmt.Sprintf("steady N=%d: coordinator CPU ≤ %.0f%% of one core", x.Nodes, 100*targetSteadyCoreShare), x.CoreShare() <= targetSteadyCoreShare, fmt.Sprintf("%.1f%%", 100*x.CoreShare())},
			Verdict{fmt.Sprintf("steady N=%d: RSS ≤ %s", x.Nodes, mb(targetSteadyRSS)), x.PeakRSS <= targetSteadyRSS, mb(x.PeakRSS)},
		)
	}
	return out
}

// olderTargets checks the rollouts of at least targetOlderMinNodes older
// nodes (docs/design.md §10.7) against the rollout of as many current
// nodes in the same run.
func (r *Results) olderTargets(current []RolloutResult) []Verdict {
	var out []Verdict
	for _, x := range r.Rollout {
		if x.OldNodes < targetOlderMinNodes {
			continue
		}
		out = append(out, Verdict{fmt.Sprintf("rollout N=%s: 0 client time-outs", x.NodesLabel()), x.Errors.Timeouts == 0, fmt.Sprint(x.Errors.Timeouts)})
		i := slices.IndexFunc(current, func(c RolloutResult) bool { return c.Nodes == x.Nodes })
		if i < 0 {
			continue
		}
		c := current[i]
		g := float64(x.CPUPerNodeBlob()) / float64(max(1, c.CPUPerNodeBlob()))
		out = append(out, Verdict{fmt.Sprintf("rollout N=%s: CPU per node-blob ≤ %.1f× that of %d current nodes", x.NodesLabel(), targetOlderCPU, c.Nodes), g <= targetOlderCPU,
			fmt.Sprintf("%.2f× (%s vs %s)", g, dur(x.CPUPerNodeBlob()), dur(c.CPUPerNodeBlob()))})
	}
	return out
}
