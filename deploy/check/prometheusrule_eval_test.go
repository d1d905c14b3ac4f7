package check

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/prometheus/prometheus/promql/promqltest"
	"github.com/stretchr/testify/require"
)

// alertCase is a history of series (promqltest's load notation, one
// sample a minute from time 0) and whether an alert's expression selects
// anything at a time: whether it fires once its `for` has passed.
type alertCase struct {
	name   string
	series string
	at     time.Duration
	fires  bool
}

// TestPrometheusRulesEvaluate runs each alert's expression of the rules
// file in Prometheus's own PromQL engine over recorded histories, the way
// the metrics behave: it fires on the history it is for and stays silent
// on the healthy ones next to it (a pass skipped, a delete granted, one
// replica leading, a cluster just started).
func TestPrometheusRulesEvaluate(t *testing.T) {
	exprs := map[string]string{}
	for _, r := range fileRules(t) {
		exprs[r.Alert] = r.Expr
	}
	cases := map[string][]alertCase{
		"SharedcontentCoordinatorDown": {
			{"every target down", `up{job="sharedcontent-coordinator",instance="c0"} 0x10`, 10 * time.Minute, true},
			{"no target at all", `up{job="sharedcontent-node-metrics",instance="n1"} 1x10`, 10 * time.Minute, true},
			{"one replica of two up", `up{job="sharedcontent-coordinator",instance="c0"} 0x10
				up{job="sharedcontent-coordinator",instance="c1"} 1x10`, 10 * time.Minute, false},
		},
		"SharedcontentNoLeader": {
			{"both stand by", `sharedcontent_leader{job="c",instance="c0"} 0x10
				sharedcontent_leader{job="c",instance="c1"} 0x10`, 10 * time.Minute, true},
			{"one leads", `sharedcontent_leader{job="c",instance="c0"} 0x10
				sharedcontent_leader{job="c",instance="c1"} 1x10`, 10 * time.Minute, false},
			{"no replicas (a single coordinator exports no leader)", `sharedcontent_members{job="c"} 3x10`, 10 * time.Minute, false},
		},
		"SharedcontentDeletesPaused": {
			{"refused for 90 minutes, none granted", `sharedcontent_delete_unsynced_total{job="c"} 0+1x90
				sharedcontent_lock_requests_total{job="c",type="delete",result="acquired"} 40x90`, 90 * time.Minute, true},
			{"refused, but a delete granted 10 minutes ago", `sharedcontent_delete_unsynced_total{job="c"} 0+1x90
				sharedcontent_lock_requests_total{job="c",type="delete",result="acquired"} 40x80 41x10`, 90 * time.Minute, false},
			{"refused, but a queued delete handed the lock 10 minutes ago", `sharedcontent_delete_unsynced_total{job="c"} 0+1x90
				sharedcontent_lock_requests_total{job="c",type="delete",result="acquired"} 40x90
				sharedcontent_lock_handoffs_total{job="c",type="delete"} 7x80 8x10`, 90 * time.Minute, false},
			{"granted, none refused", `sharedcontent_delete_unsynced_total{job="c"} 0x90
				sharedcontent_lock_requests_total{job="c",type="delete",result="acquired"} 0+1x90`, 90 * time.Minute, false},
		},
		"SharedcontentReapLockHoldCut": {
			{"a hold cut", `sharedcontent_reap_holds_cut_total{job="c"} 0x30 1x30`, time.Hour, true},
			{"none", `sharedcontent_reap_holds_cut_total{job="c"} 0x60`, time.Hour, false},
		},
		"SharedcontentCoordinatorUnreachable": {
			{"waits rising", `sharedcontent_store_coordinator_waits_total{instance="n1"} 0+5x10`, 10 * time.Minute, true},
			{"waits over", `sharedcontent_store_coordinator_waits_total{instance="n1"} 0+5x5 25x10`, 15 * time.Minute, false},
		},
		"SharedcontentNodeFailedOpen": {
			{"failing open", `sharedcontent_store_fail_open_since_timestamp_seconds{instance="n1"} 1.7e9x10`, 10 * time.Minute, true},
			{"not", `sharedcontent_store_fail_open_since_timestamp_seconds{instance="n1"} 0x10`, 10 * time.Minute, false},
		},
		"SharedcontentNodeUnsynced": {
			{"unsynced", `sharedcontent_store_synced{instance="n1"} 0x10`, 10 * time.Minute, true},
			{"synced", `sharedcontent_store_synced{instance="n1"} 1x10`, 10 * time.Minute, false},
		},
		"SharedcontentRootUnready": {
			{"unready", `sharedcontent_root_ready{instance="n1"} 1x5 0x5`, 10 * time.Minute, true},
			{"ready", `sharedcontent_root_ready{instance="n1"} 1x10`, 10 * time.Minute, false},
		},
		"SharedcontentRootChanged": {
			{"unmounted for a minute, back", `sharedcontent_root_unready_total{instance="n1",reason="not_mounted"} 0x5 1x5`, 10 * time.Minute, true},
			{"another root", `sharedcontent_root_unready_total{instance="n1",reason="identity"} 0x5 1x5`, 10 * time.Minute, true},
			{"read-only is no change of root", `sharedcontent_root_unready_total{instance="n1",reason="read_only"} 0x5 1x5`, 10 * time.Minute, false},
			{"over 15 minutes ago", `sharedcontent_root_unready_total{instance="n1",reason="not_mounted"} 0x5 1x30`, 35 * time.Minute, false},
			// Why every reason is exported at 0 from the start (contentv2):
			// a series born at 1 shows no increase.
			{"a series born at 1", `sharedcontent_root_unready_total{instance="n1",reason="not_mounted"} _x5 1x5`, 10 * time.Minute, false},
		},
		"SharedcontentRootStalled": {
			{"stalled", `sharedcontent_root_stalled{instance="n1"} 1x10`, 10 * time.Minute, true},
			{"answers", `sharedcontent_root_stalled{instance="n1"} 0x10`, 10 * time.Minute, false},
		},
		"SharedcontentRootFreeSpaceLow": {
			{"10% free", `sharedcontent_root_free_bytes{job="n",instance="n1"} 10x10
				sharedcontent_root_size_bytes{job="n",instance="n1"} 100x10`, 10 * time.Minute, true},
			{"50% free", `sharedcontent_root_free_bytes{job="n",instance="n1"} 50x10
				sharedcontent_root_size_bytes{job="n",instance="n1"} 100x10`, 10 * time.Minute, false},
		},
		"SharedcontentRootFreeSpaceCritical": {
			{"2% free", `sharedcontent_root_free_bytes{job="n",instance="n1"} 2x10
				sharedcontent_root_size_bytes{job="n",instance="n1"} 100x10`, 10 * time.Minute, true},
			{"10% free", `sharedcontent_root_free_bytes{job="n",instance="n1"} 10x10
				sharedcontent_root_size_bytes{job="n",instance="n1"} 100x10`, 10 * time.Minute, false},
		},
		"SharedcontentReaperFailing": {
			{"every pass failed", reaperPasses("n1", 0, 0, 0, 1), 4 * time.Hour, true},
			{"some failed, one ran", reaperPasses("n1", 1, 0, 0, 1), 4 * time.Hour, false},
			{"failed and skipped (another node reaps)", reaperPasses("n1", 0, 1, 0, 1), 4 * time.Hour, false},
			{"paused by its root", reaperPasses("n1", 0, 0, 1, 0), 4 * time.Hour, false},
		},
		"SharedcontentReaperNotRunning": {
			{"every node skipped", reaperPasses("n1", 0, 1, 0, 0) + "\n" + reaperPasses("n2", 0, 1, 0, 0), 4 * time.Hour, true},
			{"one node ran", reaperPasses("n1", 1, 0, 0, 0) + "\n" + reaperPasses("n2", 0, 1, 0, 0), 4 * time.Hour, false},
			{"just started: no pass offered yet", reaperPasses("n1", 0, 0, 0, 0), 4 * time.Hour, false},
		},
	}
	engine := promqltest.NewTestEngineWithOpts(t, promql.EngineOpts{MaxSamples: 1e6, Timeout: time.Minute, Parser: parser.NewParser(parser.Options{})})
	for alert, expr := range exprs {
		cs, ok := cases[alert]
		require.True(t, ok, "%s has no case here: add one", alert)
		for _, c := range cs {
			t.Run(alert+"/"+c.name, func(t *testing.T) {
				st := promqltest.LoadedStorage(t, "load 1m\n"+c.series)
				q, err := engine.NewInstantQuery(context.Background(), st, nil, expr, time.Unix(0, 0).Add(c.at))
				require.NoError(t, err)
				res := q.Exec(context.Background())
				require.NoError(t, res.Err)
				v, err := res.Vector()
				require.NoError(t, err)
				require.Equal(t, c.fires, len(v) > 0, "%s at %v over\n%s\n= %v", expr, c.at, c.series, v)
			})
		}
		delete(cases, alert)
	}
	require.Empty(t, cases, "cases of alerts the file does not have")
}

// reaperPasses is 4 hours of one node's sharedcontent_reaper_passes_total,
// one pass an hour of each result whose rate is 1 (pre-initialised at 0).
func reaperPasses(node string, ran, skipped, paused, failed int) string {
	s := ""
	for _, r := range []struct {
		name string
		rate int
	}{{"ran", ran}, {"skipped", skipped}, {"paused", paused}, {"failed", failed}} {
		if s != "" {
			s += "\n"
		}
		// One sample a minute: the counter steps once an hour.
		series := "0x59"
		for h := 1; h <= 4; h++ {
			series += " " + strconv.Itoa(h*r.rate) + "x59"
		}
		s += `sharedcontent_reaper_passes_total{job="n",instance="` + node + `",result="` + r.name + `"} ` + series
	}
	return s
}
