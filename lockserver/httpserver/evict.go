package httpserver

import (
	"net"
	"time"

	"github.com/valyala/fasthttp"
)

// Fair shares of the connection slots (docs/design.md §10.3). Slow clients from many addresses must not keep every slot
// of ConnLimits.Total while known nodes are refused (measured: 120
// slow-header connections from distinct addresses let 3 of 157 legitimate
// requests through in 40 s). So:
//
//   - a connection must send its first request header within
//     ConnLimits.FirstHeader, or it is closed;
//   - it proves itself by a request from a known caller (authenticated, or
//     anyone on a coordinator without authentication), and so does its
//     address: an address is known for knownFor after its last proven
//     connection;
//   - when every slot is taken, a new connection takes the slot of an
//     unproven one from an unknown address (from the address with the
//     most connections, the oldest first); a new connection from a known
//     address may also take the slot of the connection idle longest, and
//     then of the oldest unproven one; otherwise it is refused (503);
//   - above half the slots taken, an idle connection waits at most
//     Idle × free slots / (Total/2) (at least minIdle) before it is
//     closed: keep-alive shrinks as load grows.
//
// So strangers churn among themselves and a node that has been served
// before always gets a slot from them. Event streams (hijacked
// connections) and requests in flight from known callers are never
// evicted.

const (
	// minIdle is the shortest idle wait under load.
	minIdle = time.Second
	// sweepEvery bounds how often admit looks for idle connections.
	sweepEvery = time.Second
	// knownFor is how long an address stays known after its last proven
	// connection; maxKnownAddrs bounds how many are remembered.
	knownFor      = time.Hour
	maxKnownAddrs = 1 << 16
)

// victim returns the connection to close so that one from ip fits, and
// why, or nil when there is a free slot or nothing may go.
func (l *guardedListener) victim(ip string, now time.Time) (*trackedConn, string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.open) < l.limits.Total || (ip != "" && l.perIP[ip] >= l.limits.PerIP) {
		return nil, ""
	}
	knownNew := l.isKnown(ip, now)
	var stranger, idle, unproven *trackedConn
	for tc := range l.open {
		state := fasthttp.ConnState(tc.state.Load())
		switch {
		case state == fasthttp.StateHijacked || state == fasthttp.StateClosed:
		case !tc.proven.Load() && !l.isKnown(tc.ip, now):
			if stranger == nil || l.perIP[tc.ip] > l.perIP[stranger.ip] ||
				(l.perIP[tc.ip] == l.perIP[stranger.ip] && tc.admitted.Before(stranger.admitted)) {
				stranger = tc
			}
		case !knownNew:
		case state == fasthttp.StateIdle:
			if idle == nil || tc.since.Load() < idle.since.Load() {
				idle = tc
			}
		case !tc.proven.Load():
			if unproven == nil || tc.admitted.Before(unproven.admitted) {
				unproven = tc
			}
		}
	}
	switch {
	case stranger != nil:
		return stranger, "new"
	case idle != nil:
		return idle, "idle"
	case unproven != nil:
		return unproven, "new"
	}
	return nil, ""
}

// isKnown reports whether ip had a proven connection within knownFor.
// Callers hold mu.
func (l *guardedListener) isKnown(ip string, now time.Time) bool {
	seen, ok := l.known[ip]
	return ok && now.Sub(seen) < knownFor
}

// remember makes ip known, forgetting addresses not seen for knownFor
// when the table is full (and not adding ip if it still is).
func (l *guardedListener) remember(ip string, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.known[ip]; !ok && len(l.known) >= maxKnownAddrs {
		for a, seen := range l.known {
			if now.Sub(seen) >= knownFor {
				delete(l.known, a)
			}
		}
		if len(l.known) >= maxKnownAddrs {
			return
		}
	}
	l.known[ip] = now
}

// sweepIdle closes, at most once per sweepEvery, the connections idle for
// longer than the load allows.
func (l *guardedListener) sweepIdle(now time.Time) {
	l.mu.Lock()
	half := l.limits.Total / 2
	if len(l.open) <= half || now.Sub(l.lastSweep) < sweepEvery {
		l.mu.Unlock()
		return
	}
	l.lastSweep = now
	free := max(0, l.limits.Total-len(l.open))
	limit := max(minIdle, l.limits.Idle*time.Duration(free)/time.Duration(max(1, l.limits.Total-half)))
	var stale []*trackedConn
	for tc := range l.open {
		if fasthttp.ConnState(tc.state.Load()) == fasthttp.StateIdle && now.Sub(time.Unix(0, tc.since.Load())) > limit {
			stale = append(stale, tc)
		}
	}
	l.mu.Unlock()
	for _, tc := range stale {
		tc.evict("idle")
	}
}

// evict closes c and counts why.
func (c *trackedConn) evict(reason string) {
	c.l.onEvict(reason)
	c.Close()
}

// markProven records that c carried a request from a known caller.
func markProven(c net.Conn) {
	t, ok := c.(interface{ tracked() *trackedConn })
	if !ok {
		return
	}
	if tc := t.tracked(); tc != nil && !tc.proven.Load() && !tc.proven.Swap(true) {
		tc.firstHeader.Stop()
		if tc.ip != "" {
			tc.l.remember(tc.ip, time.Now())
		}
	}
}
