package httpserver

import (
	"fmt"
	"sync"

	"github.com/valyala/fasthttp"

	"github.com/sharedcontent/sharedcontent/lockserver/api"
)

// Leadership tells a Handler whether its replica leads (docs/design.md §7).
// A standby answers every API request 503 not_leader, naming the leader
// when it knows it; /healthz still answers (the process is alive), /readyz
// answers 200 on the leader only, /metrics on every replica. A Handler
// without one always leads: a single coordinator.
//
// The election (or an operator's static choice) implements it; both
// methods must be safe for concurrent use and cheap: Leader is asked on
// every request.
type Leadership interface {
	// Leader reports whether this replica leads now, and when it does
	// not, the leader's URL as clients reach it ("" when unknown).
	Leader() (isLeader bool, leaderURL string)
	// Changed returns a channel that is closed at the next change of
	// Leader's answer. Event streams end on it: a replica that stops
	// leading closes them, and their clients reconnect to the leader.
	Changed() <-chan struct{}
}

// Unavailability is a Leadership that can tell why no replica can lead
// (its election's store is unreachable, docs/design.md §7.2). While
// Unavailable returns an error and the replica does not lead, it answers
// 503 unavailable with that error, naming no leader, instead of
// not_leader.
type Unavailability interface {
	Unavailable() error
}

// WithLeadership makes the Handler a replica that leads only while l says
// so (docs/design.md §7).
func WithLeadership(l Leadership) HandlerOption {
	return func(h *Handler) { h.leadership = l }
}

// leads reports whether the replica leads; when it does not, it has
// answered ctx 503 not_leader with the leader's URL in the body and in
// api.LeaderHeader.
func (h *Handler) leads(ctx *fasthttp.RequestCtx) bool {
	if h.leadership == nil {
		return true
	}
	leader, url := h.leadership.Leader()
	if leader {
		return true
	}
	if u, ok := h.leadership.(Unavailability); ok {
		if err := u.Unavailable(); err != nil {
			writeError(ctx, &cannotLeadError{err: err})
			return false
		}
	}
	if url != "" {
		ctx.Response.Header.Set(api.LeaderHeader, url)
	}
	writeError(ctx, fmt.Errorf("this coordinator replica is a standby: %w", &api.NotLeaderError{Leader: url}))
	return false
}

// cannotLeadError is a replica's answer while no replica can lead: it
// matches api.ErrUnavailable, and its message is the Leadership's.
type cannotLeadError struct{ err error }

func (e *cannotLeadError) Error() string   { return e.err.Error() }
func (e *cannotLeadError) Unwrap() []error { return []error{api.ErrUnavailable, e.err} }

// leadingStream returns the channel that ends an event stream when the
// replica stops leading (nil when it always leads), or false when it does
// not lead now (ctx then has its answer). The channel is taken before the
// check, so that a change between the two still ends the stream.
func (h *Handler) leadingStream(ctx *fasthttp.RequestCtx) (<-chan struct{}, bool) {
	if h.leadership == nil {
		return nil, true
	}
	changed := h.leadership.Changed()
	return changed, h.leads(ctx)
}

// StaticLeadership is a Leadership set by hand: tests, and a replica whose
// role its operator (or an election outside this package) decides. The
// zero value is not usable; make one with NewStaticLeadership.
type StaticLeadership struct {
	mu      sync.Mutex
	leader  bool          // protected by mu
	url     string        // protected by mu
	changed chan struct{} // protected by mu: closed by the next Set that changes something
}

// NewStaticLeadership returns a Leadership that answers leader and
// leaderURL until Set changes them.
func NewStaticLeadership(leader bool, leaderURL string) *StaticLeadership {
	return &StaticLeadership{leader: leader, url: leaderURL, changed: make(chan struct{})}
}

// Leader implements Leadership.
func (s *StaticLeadership) Leader() (bool, string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.leader, s.url
}

// Changed implements Leadership.
func (s *StaticLeadership) Changed() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.changed
}

// Set changes the answer of Leader; a replica that stops leading ends its
// event streams. Setting the same answer again changes nothing.
func (s *StaticLeadership) Set(leader bool, leaderURL string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.leader == leader && s.url == leaderURL {
		return
	}
	s.leader, s.url = leader, leaderURL
	close(s.changed)
	s.changed = make(chan struct{})
}

// stillLeads replaces the answer of a request that ran while the replica
// stopped leading with 503 not_leader: a deposed replica's Coordinator may
// have granted something in memory, but nobody is told (docs/design.md
// §7). An event stream, which has taken its connection over, ends on
// Changed instead.
func (h *Handler) stillLeads(ctx *fasthttp.RequestCtx) {
	if h.leadership == nil || ctx.Hijacked() {
		return
	}
	if leader, _ := h.leadership.Leader(); leader {
		return
	}
	ctx.Response.ResetBody()
	ctx.Response.Header.Del(fasthttp.HeaderRetryAfter)
	h.leads(ctx)
}
