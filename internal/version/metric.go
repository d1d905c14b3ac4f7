package version

import "github.com/prometheus/client_golang/prometheus"

// MetricName is the build-info gauge: always 1, the build in its labels.
const MetricName = "sharedcontent_build_info"

// Collector returns a collector of MetricName{version,revision,goversion}
// for the running binary, to register once per registry.
func Collector() prometheus.Collector {
	i := Get()
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: MetricName,
		Help: "The running build of sharedcontent: always 1; its version, revision and Go version are the labels.",
		ConstLabels: prometheus.Labels{
			"version":   i.Version,
			"revision":  i.Revision,
			"goversion": i.GoVersion,
		},
	})
	g.Set(1)
	return g
}
