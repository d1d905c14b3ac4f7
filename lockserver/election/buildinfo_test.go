package election

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sharedcontent/sharedcontent/internal/version"
)

// TestMetricsBuildInfo: a replica's /metrics names its build, as a
// stand-alone coordinator's does, whether it leads or stands by.
func TestMetricsBuildInfo(t *testing.T) {
	families, err := newMetrics().Gather()
	require.NoError(t, err)
	for _, f := range families {
		if f.GetName() == version.MetricName {
			require.Len(t, f.GetMetric(), 1)
			labels := map[string]string{}
			for _, l := range f.GetMetric()[0].GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			i := version.Get()
			require.Equal(t, map[string]string{"version": i.Version, "revision": i.Revision, "goversion": i.GoVersion}, labels)
			require.Equal(t, 1.0, f.GetMetric()[0].GetGauge().GetValue())
			return
		}
	}
	t.Fatalf("no %s among the replica's metrics", version.MetricName)
}
