package httpserver

import (
	"context"
	"runtime"
	"sync/atomic"

	"github.com/valyala/fasthttp"

	"github.com/sharedcontent/sharedcontent/lockserver"
)

// Requests are served in two lanes (docs/design.md §10, "Unlocks first").
// Under a storm (a rollout: every node's lock requests and reference adds
// at once) a request waits for the CPU behind every request read before
// it, and the unlock that would wake thousands of waiters waits as long as
// the storm's newest lock request. So new work (lock requests, reference
// adds and reads, syncs, listings) is served at most bulkSlots at a time:
// the rest wait, read and parsed, costing nothing, while requests that
// end or keep what a node holds (unlock, keepalive, cancel, status checks,
// sessions) and event streams never wait for a slot. A slot is
// held while its handler runs, but for a reference add's wait for the
// commit that many adds share (§10.2): waiting costs no CPU, and the more
// adds wait together, the fuller the commit.

// bodyReadAhead is how much of a request's body fasthttp reads before
// the handler runs, with StreamRequestBody.
const bodyReadAhead = 8 << 10

// DefaultBulkSlots is the number of new-work requests served at once: 64
// per CPU, at least 128.
func DefaultBulkSlots() int { return max(128, 64*runtime.GOMAXPROCS(0)) }

// lanes admits new-work requests bulkSlots at a time.
type lanes struct {
	bulk    chan struct{}
	waiting atomic.Int64 // requests waiting for a slot
}

func newLanes(slots int) *lanes { return &lanes{bulk: make(chan struct{}, max(1, slots))} }

// enter waits for a slot of the bulk lane; leave gives it back.
func (l *lanes) enter() {
	select {
	case l.bulk <- struct{}{}:
		return
	default:
	}
	l.waiting.Add(1)
	l.bulk <- struct{}{}
	l.waiting.Add(-1)
}

func (l *lanes) leave() { <-l.bulk }

// urgent says whether a request of path is served without a slot: it ends
// or keeps what a node holds (a status check ends a wait: it claims a
// grant before its claim timeout, or learns of a skip), or it is an event
// stream (which holds its connection, not a slot), a probe or metrics.
func urgent(path []byte) bool {
	switch string(path) {
	case "/unlock", "/lock/keepalive", "/lock/cancel", "/lock/status", "/nodes/session", "/nodes/session/end",
		"/lock/subscribe", "/lock/events", "/healthz", "/readyz", "/metrics":
		return true
	}
	return false
}

// serve runs handle in its lane. A request whose body was not read whole
// before the handler (chunked, or longer than what the server reads
// ahead: a large sync) is served outside the lanes, so that clients
// sending slow bodies cannot hold the slots; those are bounded apart
// (--max-syncs, --max-sync-buffer).
func (l *lanes) serve(ctx *fasthttp.RequestCtx, path []byte, handle fasthttp.RequestHandler) {
	if n := ctx.Request.Header.ContentLength(); l == nil || urgent(path) || n < 0 || n > bodyReadAhead {
		handle(ctx)
		return
	}
	l.enter()
	held := true
	release := func() {
		if held {
			held = false
			l.leave()
		}
	}
	ctx.SetUserValue(laneReleaseKey{}, release)
	defer release()
	handle(ctx)
}

// laneReleaseKey is the user value of a request's release of its slot.
type laneReleaseKey struct{}

// commitWaits returns ctx for a coordinator call that may wait for a
// shared commit: the request's slot is given back when it starts waiting
// (lockserver.WithCommitWait).
func commitWaits(ctx *fasthttp.RequestCtx) context.Context {
	release, ok := ctx.UserValue(laneReleaseKey{}).(func())
	if !ok {
		return ctx
	}
	return lockserver.WithCommitWait(ctx, release)
}

// WithBulkSlots sets how many new-work requests are served at once
// (DefaultBulkSlots); the others wait for a slot, and unlocks, keepalives,
// cancels, sessions and event streams never do.
func WithBulkSlots(n int) HandlerOption {
	return func(h *Handler) { h.lanes = newLanes(n) }
}
