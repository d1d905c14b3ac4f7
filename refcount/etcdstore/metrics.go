package etcdstore

import (
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sharedcontent/sharedcontent/refcount"
)

// Metrics count a store's guarded transactions (docs/design.md §7.1): it
// is a prometheus.Collector that the coordinator registers once and
// passes to every handle it opens (Options.Metrics).
type Metrics struct {
	seconds *prometheus.HistogramVec
	ops     prometheus.Histogram
	bytes   prometheus.Histogram
	txns    prometheus.Counter
	failed  *prometheus.CounterVec
	// dbSize and dbInUse are etcd's own figures (PollDBSize).
	dbSize, dbInUse prometheus.Gauge
}

var _ prometheus.Collector = (*Metrics)(nil)

// NewMetrics returns the metrics of the etcd store, registered nowhere.
func NewMetrics() *Metrics {
	return &Metrics{
		seconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "sharedcontent_etcd_txn_seconds",
			Help:    "Round-trip time of the etcd store's guarded transactions, by outcome (ok, fenced, error).",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14), // 0.5 ms .. 4 s
		}, []string{"outcome"}),
		ops: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "sharedcontent_etcd_txn_ops",
			Help:    "Writes per guarded transaction of the etcd store (group commit folds many batches into one).",
			Buckets: prometheus.ExponentialBuckets(1, 2, 9), // 1 .. 256
		}),
		bytes: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "sharedcontent_etcd_txn_bytes",
			Help:    "Bytes (keys and values) each guarded transaction of the etcd store writes.",
			Buckets: prometheus.ExponentialBuckets(64, 4, 9), // 64 B .. 4 MiB
		}),
		dbSize: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sharedcontent_etcd_db_size_bytes",
			Help: "Size of etcd's database file, the largest over the members that answered (counts against --quota-backend-bytes).",
		}),
		dbInUse: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sharedcontent_etcd_db_size_in_use_bytes",
			Help: "Bytes of etcd's database in use, the largest over the members that answered (the rest is freed by a defragmentation).",
		}),
		txns: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sharedcontent_etcd_txns_total",
			Help: "Guarded transactions the etcd store sent.",
		}),
		failed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sharedcontent_etcd_txns_failed_total",
			Help: "Guarded transactions of the etcd store that failed, by reason: fenced (the guard failed: another replica leads) or other.",
		}, []string{"reason"}),
	}
}

// Describe implements prometheus.Collector.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	m.seconds.Describe(ch)
	m.ops.Describe(ch)
	m.bytes.Describe(ch)
	m.dbSize.Describe(ch)
	m.dbInUse.Describe(ch)
	m.txns.Describe(ch)
	m.failed.Describe(ch)
}

// Collect implements prometheus.Collector.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	m.seconds.Collect(ch)
	m.ops.Collect(ch)
	m.bytes.Collect(ch)
	m.dbSize.Collect(ch)
	m.dbInUse.Collect(ch)
	m.txns.Collect(ch)
	m.failed.Collect(ch)
}

// txn records one guarded transaction of ops writes (size bytes) that
// took d and failed with err, or whose guard failed (fenced).
func (m *Metrics) txn(d time.Duration, ops, size int, err error, fenced bool) {
	outcome := "ok"
	switch {
	case fenced || errors.Is(err, refcount.ErrFenced):
		outcome = "fenced"
		m.failed.WithLabelValues("fenced").Inc()
	case err != nil:
		outcome = "error"
		m.failed.WithLabelValues("other").Inc()
	}
	m.seconds.WithLabelValues(outcome).Observe(d.Seconds())
	m.ops.Observe(float64(ops))
	m.bytes.Observe(float64(size))
	m.txns.Inc()
}
