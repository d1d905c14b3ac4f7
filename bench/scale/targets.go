package scale

import (
	"fmt"
	"time"
)

// Targets of docs/design.md §10, measured with the simulator on
// the same cores as the coordinator.
const (
	targetRolloutNodes    = 2600
	targetDoneAfterDL     = 20 * time.Second
	targetWakeP99         = time.Second
	targetCPUPerNodeBlob  = 300 * time.Microsecond
	targetCPUGrowth       = 1.2 // largest N against smallest
	targetResync          = 10 * time.Second
	targetResyncBytes     = 1000 // per node
	targetSteadyCoreShare = 0.15
	targetSteadyRSS       = 250e6
)

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
	for _, x := range r.Rollout {
		if x.Nodes != targetRolloutNodes {
			continue
		}
		after := x.Wall - x.Downloaded
		out = append(out,
			Verdict{fmt.Sprintf("rollout N=%d: every node done ≤ %s after the last download", x.Nodes, targetDoneAfterDL), x.Unfinished == 0 && after <= targetDoneAfterDL,
				fmt.Sprintf("%s (last download done %s after the start; %d nodes unfinished)", dur(after), dur(x.Downloaded), x.Unfinished)},
			Verdict{fmt.Sprintf("rollout N=%d: wake-up p99 ≤ %s", x.Nodes, targetWakeP99), x.WakeP99 <= targetWakeP99, dur(x.WakeP99)},
			Verdict{fmt.Sprintf("rollout N=%d: 0 client time-outs", x.Nodes), x.Errors.Timeouts == 0, fmt.Sprint(x.Errors.Timeouts)},
			Verdict{fmt.Sprintf("rollout N=%d: coordinator CPU per node-blob ≤ %s", x.Nodes, dur(targetCPUPerNodeBlob)), x.CPUPerNodeBlob() <= targetCPUPerNodeBlob, dur(x.CPUPerNodeBlob())},
		)
	}
	if n := len(r.Rollout); n > 1 {
		lo, hi := r.Rollout[0], r.Rollout[n-1]
		g := float64(hi.CPUPerNodeBlob()) / float64(max(1, lo.CPUPerNodeBlob()))
		out = append(out, Verdict{fmt.Sprintf("rollout: CPU per node-blob at N=%d ≤ %.1f× N=%d", hi.Nodes, targetCPUGrowth, lo.Nodes), g <= targetCPUGrowth,
			fmt.Sprintf("%.2f× (%s vs %s)", g, dur(hi.CPUPerNodeBlob()), dur(lo.CPUPerNodeBlob()))})
	}
	for _, x := range r.Restart {
		perNode := x.BytesSent / int64(max(1, x.Nodes))
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
