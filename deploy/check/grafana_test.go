package check

import (
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

var (
	// metricDef is how the code names a metric: prometheus.*Opts{Name:
	// "..."}, or prometheus.NewDesc("...", ...) for a collector's own.
	metricDef = regexp.MustCompile(`(?:\bName:|\bprometheus\.NewDesc\()\s*"(sharedcontent_[a-z0-9_]+)"`)
	// metricRef is a metric of ours in PromQL.
	metricRef = regexp.MustCompile(`\bsharedcontent_[a-zA-Z0-9_:]+`)
	// selectorRef is any name PromQL selects series of: name{...} or name[range].
	selectorRef = regexp.MustCompile(`([a-zA-Z_:][a-zA-Z0-9_:]*)\s*[{\[]`)
)

// definedMetrics returns the metric names the main module's code defines,
// from its non-test Go files (not bench/ or integration/, which are tests
// and tools).
func definedMetrics(t *testing.T) map[string]bool {
	t.Helper()
	names := map[string]bool{}
	walkCode(t, func(_ string, src []byte) {
		for _, m := range metricDef.FindAllSubmatch(src, -1) {
			names[string(m[1])] = true
		}
	})
	require.True(t, names["sharedcontent_members"] && names["sharedcontent_store_synced"],
		"the code's metrics were not found (%d names): has the way they are defined changed?", len(names))
	return names
}

// exprs returns every PromQL expression of the dashboard, by panel title.
func exprs(t *testing.T, v any, title string, out map[string][]string) {
	switch v := v.(type) {
	case map[string]any:
		if s, ok := v["title"].(string); ok {
			title = s
		}
		if e, ok := v["expr"]; ok {
			s, ok := e.(string)
			require.True(t, ok && s != "", "panel %q: empty expr", title)
			out[title] = append(out[title], s)
		}
		for _, c := range v {
			exprs(t, c, title, out)
		}
	case []any:
		for _, c := range v {
			exprs(t, c, title, out)
		}
	}
}

// TestDashboardMetricsExist: every metric the Grafana dashboard queries is
// one the code defines (a histogram's _bucket, _sum and _count included),
// so renaming a metric fails here, not on an operator's screen.
func TestDashboardMetricsExist(t *testing.T) {
	used, defined := dashboardMetrics(t)
	t.Logf("the dashboard uses %d of the %d metrics", len(used), len(defined))
}

// dashboardMetrics checks the dashboard (unique panel IDs, every query
// naming metrics the code defines) and returns the metrics it queries, and
// those the code defines.
func dashboardMetrics(t *testing.T) (used, defined map[string]bool) {
	t.Helper()
	b, err := os.ReadFile("../grafana/sharedcontent.json")
	require.NoError(t, err)
	var dash struct {
		UID    string           `json:"uid"`
		Title  string           `json:"title"`
		Panels []map[string]any `json:"panels"`
	}
	require.NoError(t, json.Unmarshal(b, &dash))
	require.NotEmpty(t, dash.UID)
	require.NotEmpty(t, dash.Panels)
	ids := map[float64]bool{}
	for _, p := range dash.Panels {
		id, _ := p["id"].(float64)
		require.False(t, ids[id], "panel id %v repeats", id)
		ids[id] = true
	}

	defined = definedMetrics(t)
	byPanel := map[string][]string{}
	var raw any
	require.NoError(t, json.Unmarshal(b, &raw))
	exprs(t, raw, "", byPanel)
	require.NotEmpty(t, byPanel)
	used = map[string]bool{}
	for title, es := range byPanel {
		for _, e := range es {
			refs := metricRef.FindAllString(e, -1)
			for _, m := range selectorRef.FindAllStringSubmatch(e, -1) {
				refs = append(refs, m[1])
			}
			require.NotEmpty(t, refs, "panel %q: %s queries no metric", title, e)
			for _, name := range refs {
				base := name
				for _, suffix := range []string{"_bucket", "_sum", "_count"} {
					if s, ok := strings.CutSuffix(name, suffix); ok && defined[s] {
						base = s
					}
				}
				require.True(t, defined[base], "panel %q queries %s, which no code defines: %s", title, name, e)
				used[base] = true
			}
		}
	}
	return used, defined
}

// TestDashboardShowsDownloadProgress: the dashboard has panels for the
// downloads in progress (docs/design.md §5.10, progress on every node): what the
// nodes download now and how many bytes of it, their followers waiting,
// and the waits by outcome.
func TestDashboardShowsDownloadProgress(t *testing.T) {
	used, _ := dashboardMetrics(t)
	for _, m := range []string{
		"sharedcontent_store_downloads_in_flight",
		"sharedcontent_store_download_bytes_in_flight",
		"sharedcontent_store_followers_waiting",
		"sharedcontent_store_follower_wait_seconds",
		"sharedcontent_lock_queue_depth",
	} {
		require.True(t, used[m], "no panel queries %s", m)
	}
}
