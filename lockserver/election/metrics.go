package election

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/sharedcontent/sharedcontent/internal/version"
	"github.com/sharedcontent/sharedcontent/refcount/etcdstore"
)

// metrics are the replica's own; the term's Coordinator registers its
// metrics with a registry of its own, served while it is the last one.
type metrics struct {
	reg     *prometheus.Registry
	leader  prometheus.Gauge
	changes prometheus.Counter
	stepped *prometheus.CounterVec
	// etcd are the etcd store's: transactions, their size and round
	// trip, over every term.
	etcd *etcdstore.Metrics

	term atomic.Pointer[prometheus.Registry]
}

func newMetrics() *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		leader: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sharedcontent_leader",
			Help: "1 while this coordinator replica leads, 0 while it stands by.",
		}),
		changes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sharedcontent_leadership_changes_total",
			Help: "Times this replica started or stopped leading.",
		}),
		stepped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sharedcontent_leader_stepdowns_total",
			Help: "Times this replica stopped leading, by reason: session_lost, fenced, keepalive_lapsed, shutdown.",
		}, []string{"reason"}),
	}
	m.etcd = etcdstore.NewMetrics()
	m.reg.MustRegister(m.leader, m.changes, m.stepped, m.etcd, version.Collector())
	return m
}

// Gather implements prometheus.Gatherer: the replica's metrics and the
// last term's Coordinator's.
func (m *metrics) Gather() ([]*dto.MetricFamily, error) {
	gs := prometheus.Gatherers{m.reg}
	if t := m.term.Load(); t != nil {
		gs = append(gs, t)
	}
	return gs.Gather()
}
