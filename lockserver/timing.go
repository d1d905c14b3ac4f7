package lockserver

import (
	"fmt"
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

// uptime is this Coordinator's age at now, in milliseconds.
func (mp *memberPart) uptime(now time.Time) int64 { return now.Sub(mp.started).Milliseconds() }

// echoValid reports whether e echoes an answer of this coordinator in
// this epoch.
func (mp *memberPart) echoValid(e *api.Echo, now time.Time) bool {
	return e != nil && e.Epoch == mp.Cluster().Epoch && e.StampMs >= 0 && e.ElapsedMs >= 0 &&
		e.StampMs <= mp.uptime(now)
}

// checkLate refuses (api.ErrLate) a message with echo e that arrives at now
// more than TTL/3 after it was sent, by the echo's measure, or that echoes
// an answer more than 2·TTL/3 old. what names the message.
func (mp *memberPart) checkLate(node, what string, e *api.Echo, now time.Time) error {
	ttl := mp.cfg.SessionTTL.Milliseconds()
	age := mp.uptime(now) - (e.StampMs + e.ElapsedMs)
	if e.ElapsedMs > 2*ttl/3 || age > ttl/3 {
		mp.metrics.lateSessions.Inc()
		return fmt.Errorf("%s of node %s: sent %d ms after the answer it echoes, arrived %d ms after it was sent (at most %d and %d ms with session TTL %s); it extends nothing, open a new session: %w",
			what, node, e.ElapsedMs, age, 2*ttl/3, ttl/3, mp.cfg.SessionTTL, api.ErrLate)
	}
	return nil
}

// checkDoneLate applies the rule to the last chunk of a sync: with an echo
// as to a renewal; without one (an older node) it must arrive within TTL/3
// of the coordinator's last session answer to the node. Callers hold mmu.
func (mp *memberPart) checkDoneLate(node string, m *member, e *api.Echo, now time.Time) error {
	if e != nil {
		if !mp.echoValid(e, now) {
			return fmt.Errorf("sync of node %s: it echoes a session answer of another coordinator epoch; open a new session: %w", node, api.ErrLate)
		}
		return mp.checkLate(node, "sync", e, now)
	}
	if age := now.Sub(m.answered); age > mp.cfg.SessionTTL/3 {
		mp.metrics.lateSessions.Inc()
		return fmt.Errorf("sync of node %s: arrived %s after the last session answer (at most %s without an echo); open a new session: %w",
			node, age.Round(time.Millisecond), mp.cfg.SessionTTL/3, api.ErrLate)
	}
	return nil
}
