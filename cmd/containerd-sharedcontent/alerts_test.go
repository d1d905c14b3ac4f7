package main

import (
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sharedcontent/sharedcontent/cmd/internal/notifytest"
	"github.com/sharedcontent/sharedcontent/lockserver/lockservertest"
)

// alertRules is the rules file deploy/prometheus holds (the chart's
// PrometheusRule as its defaults render it; deploy/check keeps the two
// equal and checks the file against the code's source).
const alertRules = "../../deploy/prometheus/sharedcontent-rules.yaml"

// etcdOnlyMetrics are the alert rules' metrics that only a coordinator
// replica on etcd serves (lockserver/election), not started here.
var etcdOnlyMetrics = map[string]bool{"sharedcontent_leader": true}

// servedMetrics returns the names of the metrics an endpoint serves (its
// # TYPE lines).
func servedMetrics(t *testing.T, url string) map[string]bool {
	t.Helper()
	resp, err := (&http.Client{Timeout: 30 * time.Second}).Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode, url)
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	names := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^# TYPE (\S+) `).FindAllSubmatch(b, -1) {
		names[string(m[1])] = true
	}
	return names
}

// TestAlertMetricsServed: every metric the alert rules name is served, from
// the start, by this daemon's /metrics (run as its binary runs, against a
// real coordinator) or by the coordinator's: an alert on a series that
// only appears once something went wrong, or never, would not fire.
func TestAlertMetricsServed(t *testing.T) {
	rules, err := os.ReadFile(alertRules)
	require.NoError(t, err)
	named := map[string]bool{}
	for _, m := range regexp.MustCompile(`\bsharedcontent_[a-z0-9_]+`).FindAll(rules, -1) {
		named[string(m)] = true
	}
	require.Greater(t, len(named), 10, "the rules name our metrics")
	for m := range etcdOnlyMetrics {
		require.True(t, named[m], "%s is not in the rules any more: drop it from etcdOnlyMetrics", m)
	}

	coord := lockservertest.Start(t)
	notes := notifytest.Listen(t)
	dir := t.TempDir()
	metricsAddr := lockservertest.FreeAddr(t)
	done := make(chan error, 1)
	go func() {
		done <- run([]string{"--root", filepath.Join(dir, "content"), "--node-id", "n1", "--coordinator", coord.URL(),
			"--state-dir", filepath.Join(dir, "state"), "--address", filepath.Join(dir, "sc.sock"), "--metrics-listen", metricsAddr})
	}()
	notifytest.Wait(t, notes, "READY", time.Minute)
	node := servedMetrics(t, "http://"+metricsAddr+"/metrics")
	require.NoError(t, syscall.Kill(os.Getpid(), syscall.SIGTERM))
	require.NoError(t, <-done)
	coordinator := servedMetrics(t, coord.URL()+"/metrics")

	for m := range named {
		if etcdOnlyMetrics[m] {
			continue
		}
		require.True(t, node[m] || coordinator[m], "the alert rules name %s, which neither the node daemon nor the coordinator serves", m)
	}
}
