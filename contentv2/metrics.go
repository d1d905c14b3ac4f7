package contentv2

import "github.com/prometheus/client_golang/prometheus"

type metrics struct {
	uncoordinated *prometheus.CounterVec
	writes        *prometheus.CounterVec
	deletes       *prometheus.CounterVec
	pendingRefs   prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		uncoordinated: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sharedcontent_store_uncoordinated_total",
			Help: "Operations that met an unreachable coordinator: writes and refs went ahead (fail-open), deletes were skipped (fail-closed).",
		}, []string{"op"}),
		writes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sharedcontent_store_writers_total",
			Help: "Writer calls by outcome: acquired (this node downloads), busy (another node holds it), skipped (another node finished it), exists (library mode), local (no digest), uncoordinated.",
		}, []string{"result"}),
		deletes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sharedcontent_store_deletes_total",
			Help: "Delete calls by outcome: deleted, in_use (kept for other nodes), locked, skipped, unreachable.",
		}, []string{"result"}),
		pendingRefs: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sharedcontent_store_pending_refs",
			Help: "References waiting for the coordinator to be reachable.",
		}),
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.uncoordinated, m.writes, m.deletes, m.pendingRefs} {
			if err := reg.Register(c); err != nil {
				return nil, err
			}
		}
	}
	return m, nil
}
