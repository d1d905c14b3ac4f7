package httpserver

import "github.com/prometheus/client_golang/prometheus"

// serverMetrics are the metrics of a Server's connections.
type serverMetrics struct {
	rejectedVec  *prometheus.CounterVec
	evictedVec   *prometheus.CounterVec
	acceptErrors prometheus.Counter
}

func newServerMetrics() *serverMetrics {
	return &serverMetrics{
		rejectedVec: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sharedcontent_http_connections_rejected_total",
			Help: "Connections answered 503 because a limit was reached (total, per_ip).",
		}, []string{"reason"}),
		evictedVec: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sharedcontent_http_connections_evicted_total",
			Help: "Connections closed to keep slots fair: first_header (no request header in time), new (an unproven connection made room), idle (an idle one made room or waited longer than the load allows).",
		}, []string{"reason"}),
		acceptErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sharedcontent_http_accept_errors_total",
			Help: "Accepts that failed (out of descriptors, ...) and were retried after a backoff.",
		}),
	}
}

func (m *serverMetrics) rejected(reason string) { m.rejectedVec.WithLabelValues(reason).Inc() }
func (m *serverMetrics) evicted(reason string)  { m.evictedVec.WithLabelValues(reason).Inc() }

// Describe and Collect make serverMetrics one prometheus.Collector.
func (m *serverMetrics) Describe(ch chan<- *prometheus.Desc) {
	m.rejectedVec.Describe(ch)
	m.evictedVec.Describe(ch)
	m.acceptErrors.Describe(ch)
}

func (m *serverMetrics) Collect(ch chan<- prometheus.Metric) {
	m.rejectedVec.Collect(ch)
	m.evictedVec.Collect(ch)
	m.acceptErrors.Collect(ch)
}
