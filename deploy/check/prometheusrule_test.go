package check

import (
	"encoding/json"
	"log/slog"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"
)

const (
	// rulesFile holds the alert rules for a Prometheus without the
	// Operator: the chart's PrometheusRule as its defaults render it (make
	// prometheus-rules writes it).
	rulesFile = "../prometheus/sharedcontent-rules.yaml"
	// rulesRendered is the rendering of the chart (ci/monitoring-values.yaml:
	// its defaults, monitoring on) whose PrometheusRule rulesFile repeats.
	rulesRendered = "monitoring"
	// runbookPage is where every alert's runbook is, one section each.
	runbookPage = "../../docs/operations.md"
)

// parseRules parses and validates a rules file with Prometheus's own
// loader (rulefmt, the code of `promtool check rules` and of Prometheus's
// rule loading): unknown fields, PromQL that does not parse, annotation
// templates that do not, duplicate groups.
func parseRules(t *testing.T, name string, b []byte) *rulefmt.RuleGroups {
	t.Helper()
	groups, errs := rulefmt.Parse(b, false, model.UTF8Validation, parser.NewParser(parser.Options{}), slog.New(slog.DiscardHandler))
	require.Empty(t, errs, "%s: Prometheus refuses these rules", name)
	require.NotEmpty(t, groups.Groups, name)
	return groups
}

// renderedRules returns the spec of the PrometheusRule in a rendering of
// the chart, as YAML, and the object decoded strictly.
func renderedRules(t *testing.T, rendered []byte) []byte {
	t.Helper()
	var spec []byte
	for _, doc := range documents(rendered) {
		var obj struct {
			Kind string         `json:"kind"`
			Spec map[string]any `json:"spec"`
		}
		require.NoError(t, yaml.Unmarshal(doc, &obj))
		if obj.Kind != "PrometheusRule" {
			continue
		}
		require.Nil(t, spec, "one PrometheusRule")
		require.NoError(t, (&manifests{}).add(doc), "the PrometheusRule decodes strictly")
		b, err := yaml.Marshal(obj.Spec)
		require.NoError(t, err)
		spec = b
	}
	require.NotNil(t, spec, "no PrometheusRule rendered")
	return spec
}

// TestPrometheusRulesFile: the rules file is valid for Prometheus and is
// the chart's PrometheusRule as its defaults render it, rule for rule
// (one source of truth: make prometheus-rules writes the file).
func TestPrometheusRulesFile(t *testing.T) {
	file, err := os.ReadFile(rulesFile)
	require.NoError(t, err)
	parseRules(t, rulesFile, file)

	golden, err := os.ReadFile(renderedFiles(t)[rulesRendered])
	require.NoError(t, err)
	spec := renderedRules(t, golden)
	parseRules(t, rulesRendered, spec)
	var want, got any
	require.NoError(t, yaml.Unmarshal(spec, &want))
	require.NoError(t, yaml.Unmarshal(file, &got))
	require.Equal(t, want, got, "%s is not the chart's PrometheusRule: make prometheus-rules", rulesFile)
}

// TestPrometheusRulesMetricsExist: every series an alert selects is one
// the code defines (or Prometheus's own `up`), and every label value it
// matches on is a string the code has: renaming a metric or a label value
// fails here, not by an alert that never fires.
func TestPrometheusRulesMetricsExist(t *testing.T) {
	defined := definedMetrics(t)
	literals := map[string]bool{}
	literal := regexp.MustCompile(`"([a-z_]+)"`)
	walkCode(t, func(_ string, src []byte) {
		for _, m := range literal.FindAllSubmatch(src, -1) {
			literals[string(m[1])] = true
		}
	})
	used := map[string]bool{}
	selectors := map[string]int{}
	eachSelector(t, func(r rulefmt.Rule, vs *parser.VectorSelector) {
		selectors[r.Alert]++
		require.True(t, vs.Name == "up" || defined[vs.Name], "%s selects %s, which no code defines: %s", r.Alert, vs.Name, r.Expr)
		used[vs.Name] = true
		for _, m := range vs.LabelMatchers {
			if m.Name == labels.MetricName || m.Name == "job" {
				continue
			}
			require.Contains(t, []labels.MatchType{labels.MatchEqual, labels.MatchRegexp}, m.Type, "%s: %s", r.Alert, m)
			for _, v := range strings.Split(m.Value, "|") {
				require.True(t, literals[v], "%s matches %s=%q, a value the code never gives: %s", r.Alert, m.Name, v, r.Expr)
			}
		}
	})
	for _, r := range fileRules(t) {
		require.NotZero(t, selectors[r.Alert], "%s selects no series", r.Alert)
	}
	t.Logf("the alerts use %d of the %d metrics", len(used), len(defined))
}

// TestDashboardShowsAlertMetrics: every metric an alert fires on (but
// Prometheus's `up`) has a panel on the Grafana dashboard, so whoever is
// paged sees its history.
func TestDashboardShowsAlertMetrics(t *testing.T) {
	onDashboard, _ := dashboardMetrics(t)
	eachSelector(t, func(r rulefmt.Rule, vs *parser.VectorSelector) {
		require.True(t, vs.Name == "up" || onDashboard[vs.Name], "%s fires on %s, which no dashboard panel shows", r.Alert, vs.Name)
	})
}

// TestDashboardLayout: no two panels of the dashboard overlap.
func TestDashboardLayout(t *testing.T) {
	b, err := os.ReadFile("../grafana/sharedcontent.json")
	require.NoError(t, err)
	var dash struct {
		Panels []struct {
			ID      int    `json:"id"`
			Title   string `json:"title"`
			GridPos struct {
				H, W, X, Y int
			} `json:"gridPos"`
		} `json:"panels"`
	}
	require.NoError(t, json.Unmarshal(b, &dash))
	for i, a := range dash.Panels {
		require.LessOrEqual(t, a.GridPos.X+a.GridPos.W, 24, "panel %q is wider than the grid", a.Title)
		for _, c := range dash.Panels[i+1:] {
			apart := a.GridPos.X+a.GridPos.W <= c.GridPos.X || c.GridPos.X+c.GridPos.W <= a.GridPos.X ||
				a.GridPos.Y+a.GridPos.H <= c.GridPos.Y || c.GridPos.Y+c.GridPos.H <= a.GridPos.Y
			require.True(t, apart, "panels %q and %q overlap", a.Title, c.Title)
		}
	}
}

// fileRules returns the rules of the rules file, parsed and validated.
func fileRules(t *testing.T) []rulefmt.Rule {
	t.Helper()
	file, err := os.ReadFile(rulesFile)
	require.NoError(t, err)
	var rules []rulefmt.Rule
	for _, g := range parseRules(t, rulesFile, file).Groups {
		rules = append(rules, g.Rules...)
	}
	require.NotEmpty(t, rules)
	return rules
}

// eachSelector calls fn with every series selector of every alert of the
// rules file, as Prometheus's parser reads it.
func eachSelector(t *testing.T, fn func(r rulefmt.Rule, vs *parser.VectorSelector)) {
	t.Helper()
	p := parser.NewParser(parser.Options{})
	for _, r := range fileRules(t) {
		expr, err := p.ParseExpr(r.Expr)
		require.NoError(t, err, r.Alert)
		parser.Inspect(expr, func(n parser.Node, _ []parser.Node) error {
			if vs, ok := n.(*parser.VectorSelector); ok {
				fn(r, vs)
			}
			return nil
		})
	}
}

// githubAnchor is the anchor GitHub gives a Markdown heading.
func githubAnchor(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '-', r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteRune('-')
		}
	}
	return b.String()
}

// TestPrometheusRulesRunbooks: every alert has a severity, a summary, a
// description, and a runbook_url into docs/operations.md at a section of
// its own name, which exists.
func TestPrometheusRulesRunbooks(t *testing.T) {
	doc, err := os.ReadFile(runbookPage)
	require.NoError(t, err)
	anchors := map[string]bool{}
	for _, h := range regexp.MustCompile(`(?m)^#+ (.+)$`).FindAllStringSubmatch(string(doc), -1) {
		anchors[githubAnchor(strings.TrimSpace(h[1]))] = true
	}
	var values struct {
		PrometheusRule struct {
			RunbookURL string `json:"runbookURL"`
		} `json:"prometheusRule"`
	}
	b, err := os.ReadFile(filepath.Join(chartDir, "values.yaml"))
	require.NoError(t, err)
	require.NoError(t, yaml.Unmarshal(b, &values))
	base := values.PrometheusRule.RunbookURL
	require.True(t, strings.HasSuffix(base, "/docs/operations.md"), "prometheusRule.runbookURL is docs/operations.md: %s", base)

	for _, r := range fileRules(t) {
		require.NotEmpty(t, r.Alert, "every rule is an alert")
		require.Contains(t, []string{"warning", "critical"}, r.Labels["severity"], r.Alert)
		require.NotEmpty(t, r.Annotations["summary"], r.Alert)
		require.NotEmpty(t, r.Annotations["description"], r.Alert)
		u, err := url.Parse(r.Annotations["runbook_url"])
		require.NoError(t, err, r.Alert)
		require.Equal(t, base, strings.TrimSuffix(r.Annotations["runbook_url"], "#"+u.Fragment), r.Alert)
		require.Equal(t, strings.ToLower(r.Alert), u.Fragment, "%s: its runbook is the section named as the alert", r.Alert)
		require.True(t, anchors[u.Fragment], "%s: docs/operations.md has no section #%s", r.Alert, u.Fragment)
	}
}

// ruleByAlert returns the rules of a rendered chart by alert name.
func ruleByAlert(t *testing.T, rendered []byte) map[string]rulefmt.Rule {
	t.Helper()
	out := map[string]rulefmt.Rule{}
	for _, g := range parseRules(t, "rendered", renderedRules(t, rendered)).Groups {
		for _, r := range g.Rules {
			out[r.Alert] = r
		}
	}
	return out
}

// TestHelmPrometheusRule: rendered with other values, the chart's rules
// stay valid and fit the objects beside them: the coordinator's `up`
// alert names the job of the Service its ServiceMonitor scrapes (the
// headless one of the replicas on etcd), is left out for a coordinator
// run elsewhere unless its job is given, and the thresholds reach the
// expressions.
func TestHelmPrometheusRule(t *testing.T) {
	helm := helmBinary()
	if helm == "" {
		t.Skip("no helm: make helm-check builds it and runs this test with it")
	}
	render := func(t *testing.T, set ...string) []byte {
		t.Helper()
		args := []string{"template", "sharedcontent", chartDir, "-n", "sharedcontent", "--set", "image.tag=v0.1.0",
			"--set", "prometheusRule.enabled=true", "--set", "serviceMonitor.enabled=true"}
		for _, s := range set {
			args = append(args, "--set", s)
		}
		out, err := exec.Command(helm, args...).CombinedOutput()
		require.NoError(t, err, "%s", out)
		return out
	}
	upJob := regexp.MustCompile(`up\{job="([^"]+)"\}`)
	coordinatorJob := func(t *testing.T, out []byte) string {
		t.Helper()
		r, ok := ruleByAlert(t, out)["SharedcontentCoordinatorDown"]
		require.True(t, ok, "SharedcontentCoordinatorDown is rendered")
		m := upJob.FindAllStringSubmatch(r.Expr, -1)
		require.NotEmpty(t, m, r.Expr)
		for _, j := range m {
			require.Equal(t, m[0][1], j[1], r.Expr)
		}
		return m[0][1]
	}
	// scrapedJob is the job the Operator gives the coordinator's targets:
	// the name of the Service its ServiceMonitor selects.
	scrapedJob := func(t *testing.T, out []byte) string {
		t.Helper()
		m := &manifests{}
		for _, doc := range documents(out) {
			require.NoError(t, m.add(doc))
		}
		for _, sm := range m.serviceMonitor {
			if strings.HasSuffix(sm.Name, "-coordinator") {
				require.Empty(t, sm.Spec.JobLabel, "the job is the Service's name")
				svc, _ := scrapedService(t, m, sm)
				return svc.Name
			}
		}
		t.Fatal("no coordinator ServiceMonitor")
		return ""
	}

	t.Run("single", func(t *testing.T) {
		out := render(t)
		require.Equal(t, scrapedJob(t, out), coordinatorJob(t, out))
	})
	t.Run("replicas", func(t *testing.T) {
		out := render(t, "coordinator.ha.etcdEndpoints={http://etcd:2379}")
		require.Equal(t, scrapedJob(t, out), coordinatorJob(t, out))
	})
	t.Run("external", func(t *testing.T) {
		ext := []string{"coordinator.enabled=false", "coordinator.externalURL=http://coordinator.example:8642"}
		rules := ruleByAlert(t, render(t, ext...))
		require.NotContains(t, rules, "SharedcontentCoordinatorDown", "no job to watch")
		require.Contains(t, rules, "SharedcontentRootUnready")
		require.Equal(t, "lockserver", coordinatorJob(t, render(t, append(ext, "prometheusRule.coordinatorJob=lockserver")...)))
	})
	t.Run("thresholds", func(t *testing.T) {
		rules := ruleByAlert(t, render(t, "prometheusRule.rootFreeWarning=0.3", "prometheusRule.deletesPausedFor=6h",
			"prometheusRule.nodeUnsyncedFor=1h", "prometheusRule.reaperWindow=12h", "prometheusRule.coordinatorDownFor=5m"))
		require.True(t, strings.HasSuffix(rules["SharedcontentRootFreeSpaceLow"].Expr, "< 0.3"), rules["SharedcontentRootFreeSpaceLow"].Expr)
		require.Equal(t, 3, strings.Count(rules["SharedcontentDeletesPaused"].Expr, "[6h]"), rules["SharedcontentDeletesPaused"].Expr)
		require.Equal(t, "1h", rules["SharedcontentNodeUnsynced"].For.String())
		require.Equal(t, "5m", rules["SharedcontentCoordinatorDown"].For.String())
		for _, a := range []string{"SharedcontentReaperFailing", "SharedcontentReaperNotRunning"} {
			require.Equal(t, 2, strings.Count(rules[a].Expr, "[12h]"), rules[a].Expr)
		}
	})
	t.Run("labels", func(t *testing.T) {
		m := &manifests{}
		for _, doc := range documents(render(t, "prometheusRule.labels.release=kube-prometheus")) {
			require.NoError(t, m.add(doc))
		}
		require.Len(t, m.rules, 1)
		require.Equal(t, "kube-prometheus", m.rules[0].Labels["release"])
	})
}
