package lockserver

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Results of a Lock call, the "result" label of
// sharedcontent_lock_requests_total.
const (
	resultAcquired = iota
	resultSkipped
	resultQueued
	resultLocked
	resultInUse
	resultUnsynced
	numResults
)

var resultNames = [numResults]string{"acquired", "skipped", "queued", "locked", "in_use", "unsynced"}

// metrics are the coordinator's Prometheus series (docs/design.md §3.9). The
// label children are resolved once so the hot path does no map lookups.
type metrics struct {
	results    [numTypes][numResults]prometheus.Counter
	handoffs   [numTypes]prometheus.Counter
	expiries   *prometheus.CounterVec
	wait       [numTypes]prometheus.Observer
	hold       [numTypes]prometheus.Observer
	queueDepth [numTypes]prometheus.Gauge
	// members counts the cluster's member nodes.
	members prometheus.Gauge
	// unsyncedRefusals counts deletes refused (or revoked) because a
	// member was not synced.
	unsyncedRefusals prometheus.Counter
	// writeFailures counts database writes that failed (health.go).
	writeFailures prometheus.Counter
	// membersExpired counts members the reaper expired (expire.go).
	membersExpired prometheus.Counter
	// reapHoldsCut counts holds of the reaper's lock ended at their
	// bound (reaplock.go).
	reapHoldsCut prometheus.Counter
	// lateSessions and duplicateNodes count session calls refused: late
	// renewals and syncs (timing.go), duplicate node IDs (members.go).
	lateSessions, duplicateNodes prometheus.Counter
	// rootClaimed counts sessions refused as naming a root that is not
	// the cluster's (rootclaim.go).
	rootClaimed prometheus.Counter
	// noSessionRefusals counts references refused because their node
	// held no live session (refrule.go).
	noSessionRefusals prometheus.Counter
	// hashesBuilt counts the starts' hashes by how they were got
	// (refcount.HashesWalk, HashesWarm).
	hashesBuilt *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	requests := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sharedcontent_lock_requests_total",
		Help: "Lock requests by type and result (acquired, skipped, queued, locked, in_use, unsynced); a queued request is counted again when it is skipped or refused.",
	}, []string{"type", "result"})
	handoffs := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sharedcontent_lock_handoffs_total",
		Help: "Grants made to a queued waiter when a holder went.",
	}, []string{"type"})
	expiries := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sharedcontent_lock_expiries_total",
		Help: "Grants released without their holder: lease expired, or never claimed.",
	}, []string{"type", "reason"})
	buckets := prometheus.ExponentialBuckets(0.0005, 4, 12) // 0.5 ms … ~35 min
	wait := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "sharedcontent_lock_wait_seconds",
		Help:    "Time a queued request waited until granted, skipped or refused.",
		Buckets: buckets,
	}, []string{"type"})
	hold := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "sharedcontent_lock_hold_seconds",
		Help:    "Time a grant was held until released.",
		Buckets: buckets,
	}, []string{"type"})
	depth := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "sharedcontent_lock_queue_depth",
		Help: "Requests waiting in lock queues.",
	}, []string{"type"})
	members := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "sharedcontent_members",
		Help: "Member nodes of the cluster (docs/design.md §8.4): deletes wait until every one is synced.",
	})
	unsynced := prometheus.NewCounter(prometheus.CounterOpts{
		Name: "sharedcontent_delete_unsynced_total",
		Help: "Deletes refused, or revoked at their last check, because a member node was not synced; GC resumes once it is.",
	})
	writeFailures := prometheus.NewCounter(prometheus.CounterOpts{
		Name: "sharedcontent_db_write_failures_total",
		Help: "Database writes that failed (full disk, I/O error): each request answered 503 and changed nothing; /readyz is unready until a write succeeds.",
	})
	expired := prometheus.NewCounter(prometheus.CounterOpts{
		Name: "sharedcontent_members_expired_total",
		Help: "Members forgotten automatically: unheard of for node_expiry of the coordinator's uptime and their marker unchanged that long (the log line gives both measures).",
	})
	holdsCut := prometheus.NewCounter(prometheus.CounterOpts{
		Name: "sharedcontent_reap_holds_cut_total",
		Help: "Holds of the reaper's lock ended at --reap-max-hold: the holder lost it and may not take it again for as long (a stuck or hostile reaper).",
	})
	refused := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sharedcontent_session_refusals_total",
		Help: "Session calls refused by reason: late (a renewal or sync arrived more than TTL/3 after it was sent; it extended nothing), duplicate_node (another instance holds a live session under the node ID), root_claimed (the node's shared root is not the cluster's: none where the cluster has one, or another one).",
	}, []string{"reason"})
	noSession := prometheus.NewCounter(prometheus.CounterOpts{
		Name: "sharedcontent_refs_no_session_total",
		Help: "References refused (refs/add, a pull's unlock with success; nothing recorded) because their node held no live session: it lapsed, the coordinator restarted or took over, or the node was forgotten. The node opens its session again and retries.",
	})
	hashesBuilt := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sharedcontent_hashes_built_total",
		Help: "The members' reference hashes a coordinator got when it started, by how: walk (every reference read from the store), warm (kept by the standby from etcd's watch; docs/design.md §7.2).",
	}, []string{"how"})
	if reg != nil {
		for _, c := range []prometheus.Collector{requests, handoffs, expiries, wait, hold, depth, members, unsynced, writeFailures, expired, holdsCut, refused, noSession, hashesBuilt} {
			if err := reg.Register(c); err != nil {
				return nil, err
			}
		}
	}
	m := &metrics{expiries: expiries, members: members, unsyncedRefusals: unsynced, writeFailures: writeFailures, membersExpired: expired, reapHoldsCut: holdsCut,
		lateSessions: refused.WithLabelValues("late"), duplicateNodes: refused.WithLabelValues("duplicate_node"),
		rootClaimed: refused.WithLabelValues("root_claimed"), noSessionRefusals: noSession, hashesBuilt: hashesBuilt}
	for t, name := range typeNames {
		for res, rn := range resultNames {
			m.results[t][res] = requests.WithLabelValues(string(name), rn)
		}
		m.handoffs[t] = handoffs.WithLabelValues(string(name))
		m.wait[t] = wait.WithLabelValues(string(name))
		m.hold[t] = hold.WithLabelValues(string(name))
		m.queueDepth[t] = depth.WithLabelValues(string(name))
	}
	return m, nil
}

func (m *metrics) result(t typeIndex, res int) { m.results[t][res].Inc() }
