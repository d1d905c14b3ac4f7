package scale

import (
	"fmt"
	"maps"
	"slices"
	"strings"
)

// Acts is what the nodes' contentv2 stores did in a rollout, summed over
// the nodes: what the benchmark saw of them, and their own counters
// (contentv2/metrics.go).
type Acts struct {
	// FailedCalls counts the coordination calls that ended without the
	// coordinator's answer while their caller still waited (a time-out
	// of contentv2's bound, a refused connection): after each, a store
	// marks the coordinator down for contentv2.DefaultRefRetryInterval
	// (its calls then fail at once), or a follower asks again.
	FailedCalls int64
	// FirstFailure is one node's first such call's error.
	FirstFailure string
	// WriterRetries counts the Writers answered ErrUnavailable, which
	// containerd's content.OpenWriter waits out and opens again.
	WriterRetries int64
	// Counters sums the stores' counters of what they did, by
	// "name{label}" without the sharedcontent_store_ prefix and _total
	// suffix: writers by result, follows by result, coordinator_waits
	// (writes and uses answered ErrUnavailable for want of the
	// coordinator, not failing open yet), uncoordinated by op (went
	// ahead without the coordinator), root_unready by reason (the shared
	// root did not check out: writes refused), skip_refs (references
	// the coordinator recorded with a follower's skip: no /refs/add).
	Counters map[string]float64
}

// actCounters are the stores' counters Acts sums.
var actCounters = []string{
	"sharedcontent_store_writers_total",
	"sharedcontent_store_follows_total",
	"sharedcontent_store_skip_refs_total",
	"sharedcontent_store_coordinator_waits_total",
	"sharedcontent_store_uncoordinated_total",
	"sharedcontent_root_unready_total",
}

// resetActs forgets what the benchmark saw of n's store so far (its
// setup); the store's own counters count only writes, none at setup.
func (n *node) resetActs() {
	n.failedCalls.Store(0)
	n.writerRetries.Store(0)
	n.failedErr.Store(nil)
}

// acts sums what the nodes' stores did.
func acts(nodes []*node) (Acts, error) {
	a := Acts{Counters: map[string]float64{}}
	for _, n := range nodes {
		a.FailedCalls += n.failedCalls.Load()
		a.WriterRetries += n.writerRetries.Load()
		if e := n.failedErr.Load(); e != nil && a.FirstFailure == "" {
			a.FirstFailure = *e
		}
		if n.reg == nil {
			continue
		}
		mfs, err := n.reg.Gather()
		if err != nil {
			return a, fmt.Errorf("node %s: its store's counters: %w", n.id, err)
		}
		for _, mf := range mfs {
			if !slices.Contains(actCounters, mf.GetName()) {
				continue
			}
			name := strings.TrimPrefix(mf.GetName(), "sharedcontent_")
			name = strings.TrimSuffix(strings.TrimPrefix(name, "store_"), "_total")
			for _, m := range mf.GetMetric() {
				key := name
				for _, l := range m.GetLabel() {
					key += "{" + l.GetValue() + "}"
				}
				a.Counters[key] += m.GetCounter().GetValue()
			}
		}
	}
	return a, nil
}

// Uncoordinated is how many writes and references went ahead without
// the coordinator (fail-open).
func (a Acts) Uncoordinated() float64 {
	return a.Counters["uncoordinated{write}"] + a.Counters["uncoordinated{ref}"]
}

// String lists the non-zero counters, in name order.
func (a Acts) String() string {
	var out []string
	for _, k := range slices.Sorted(maps.Keys(a.Counters)) {
		if v := a.Counters[k]; v != 0 {
			out = append(out, fmt.Sprintf("%s %.0f", k, v))
		}
	}
	return strings.Join(out, ", ")
}
