package lockserver

import (
	"fmt"
	"sync/atomic"
	"time"

	"github.com/sharedcontent/sharedcontent/lockserver/api"
)

// The timing rule of sessions (docs/design.md §8.8). A
// node may use blobs unregistered once its session has surely expired in
// the coordinator's eyes, even when messages are delayed. Every session
// answer carries a stamp (the coordinator's uptime, monotonic, with its
// epoch); a renewal echoes the stamp of the last answer the node received
// plus the node's monotonic time since. stamp + elapsed is never later
// than the renewal's true send time (the answer was received after it was
// stamped), so the coordinator's estimate of its age is conservative.
//
// A renewal arriving more than TTL/3 after that estimate, or echoing an
// answer more than 2·TTL/3 old, extends nothing (api.ErrLate). The node
// counts its fail-open delay from the send time of its last renewal:
// the session then ends at most TTL/3 + TTL later (plus a tenth for clock
// rate, since elapsed is measured by the node's clock).
//
// A request without a valid echo (none, another epoch) opens a session
// that is not synced: only a sync in it (whose last chunk obeys the same
// rule) makes the node synced, so a delayed session-open can never keep a
// node synced.

// timingRule is the timing rule as the members' sessions (members.go)
// and the syncs (sync.go, synchash.go) apply it: this Coordinator's start,
// the session TTL and the epoch of the cluster's identity. It is set at
// start and takes no lock; what it is given of a member (when it was last
// answered) its callers read under mmu.
type timingRule struct {
	// started is when the Coordinator started (monotonic, by its
	// clock): answers are stamped with the uptime since.
	started time.Time
	ttl     time.Duration
	// cluster is the coordinator's identity (cluster.go), for its epoch.
	cluster *atomic.Pointer[api.Cluster]
	metrics *metrics
}

// uptime is this Coordinator's age at now, in milliseconds.
func (tr *timingRule) uptime(now time.Time) int64 { return now.Sub(tr.started).Milliseconds() }

// echoValid reports whether e echoes an answer of this coordinator in
// this epoch.
func (tr *timingRule) echoValid(e *api.Echo, now time.Time) bool {
	return e != nil && e.Epoch == tr.cluster.Load().Epoch && e.StampMs >= 0 && e.ElapsedMs >= 0 &&
		e.StampMs <= tr.uptime(now)
}

// checkLate refuses (api.ErrLate) a message with echo e that arrives at now
// more than TTL/3 after it was sent, by the echo's measure, or that echoes
// an answer more than 2·TTL/3 old. what names the message.
func (tr *timingRule) checkLate(node, what string, e *api.Echo, now time.Time) error {
	ttl := tr.ttl.Milliseconds()
	age := tr.uptime(now) - (e.StampMs + e.ElapsedMs)
	if e.ElapsedMs > 2*ttl/3 || age > ttl/3 {
		tr.metrics.lateSessions.Inc()
		return fmt.Errorf("%s of node %s: sent %d ms after the answer it echoes, arrived %d ms after it was sent (at most %d and %d ms with session TTL %s); it extends nothing, open a new session: %w",
			what, node, e.ElapsedMs, age, 2*ttl/3, ttl/3, tr.ttl, api.ErrLate)
	}
	return nil
}

// checkDoneLate applies the rule to the last chunk of a sync: with an echo
// as to a renewal; without one (an older node) it must arrive within TTL/3
// of answered, the coordinator's last session answer to the node.
func (tr *timingRule) checkDoneLate(node string, answered time.Time, e *api.Echo, now time.Time) error {
	if e != nil {
		if !tr.echoValid(e, now) {
			return fmt.Errorf("sync of node %s: it echoes a session answer of another coordinator epoch; open a new session: %w", node, api.ErrLate)
		}
		return tr.checkLate(node, "sync", e, now)
	}
	if age := now.Sub(answered); age > tr.ttl/3 {
		tr.metrics.lateSessions.Inc()
		return fmt.Errorf("sync of node %s: arrived %s after the last session answer (at most %s without an echo); open a new session: %w",
			node, age.Round(time.Millisecond), tr.ttl/3, api.ErrLate)
	}
	return nil
}
