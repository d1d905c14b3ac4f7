package lockclient

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/sharedcontent/sharedcontent/lockserver/api"
)

// Lease is a held lock. Its exported fields describe it and must not be
// changed. While it is held, the lease renews itself every TTL/3 (a timer
// whose function the lease owns: no goroutine waits between renewals);
// Unlock (or Client.Close) stops it and waits for a renewal in flight.
//
// It is NOT safe to assume that the lock is held until Unlock: if renewals
// fail for a whole TTL (partition, coordinator restart) the coordinator
// gives the lock to the next waiter, and Lost closes. Fence increases with
// every grant, so a resource that can check it can refuse a stale holder.
type Lease struct {
	// ID is the lease's capability: only its holder can renew or release.
	ID string
	// Fence is strictly increasing across all grants of the coordinator.
	Fence      uint64
	Type       api.OperationType
	ResourceID string
	NodeID     string
	// TTL is the lease's lifetime without renewal.
	TTL time.Duration

	requestID string

	// Set by start, then read only by renewals (which never overlap: each
	// arms the timer for the next) and stop.
	ctx            context.Context // logger; never cancelled
	transport      Transport
	requestTimeout time.Duration
	renewed        time.Time      // last successful renewal (or the grant)
	renewing       sync.WaitGroup // the renewal in flight

	mu sync.Mutex
	// heldSince is when the request that the grant or the last
	// successful renewal answered was sent: the coordinator holds the
	// lease for at least a TTL from then. Protected by mu.
	heldSince time.Time
	timer     *time.Timer   // protected by mu; nil without keepalive
	stopped   bool          // protected by mu: no renewal may start
	err       error         // protected by mu: why the lease was lost
	lost      chan struct{} // protected by mu: made by Lost, closed once err is set
}

func newLease(req api.LockRequest, resp api.LockResponse) *Lease {
	ttl := time.Duration(resp.LeaseTTLMs) * time.Millisecond
	if ttl <= 0 {
		ttl = fallbackLeaseTTL
	}
	return &Lease{
		ID:         resp.LeaseID,
		Fence:      resp.Fence,
		Type:       req.Type,
		ResourceID: req.ResourceID,
		NodeID:     req.NodeID,
		TTL:        ttl,
		requestID:  req.RequestID,
	}
}

// Lost returns a channel that closes when the lease lapsed while held: no
// renewal succeeded for a whole TTL (measured by the client from the grant
// or the last successful renewal), or the coordinator answered that it no
// longer knows the lease. It never closes after Unlock.
func (l *Lease) Lost() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	// Made on demand: most leases are unlocked without anyone asking.
	if l.lost == nil {
		l.lost = make(chan struct{})
		if l.err != nil {
			close(l.lost)
		}
	}
	return l.lost
}

// Err returns nil while the lease is held, and an error matching
// ErrLeaseLost saying why once Lost has closed.
func (l *Lease) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

// HeldUntil returns a time until which the coordinator surely holds the
// lease, unless its holder released it: a TTL after the request that the
// grant or the last successful renewal answered was sent (the coordinator
// counts its TTL from that request's arrival, and one that adopts the
// lease after a failover from its own start, later still: docs/design.md
// §3.7), less a tenth of the TTL for the clocks' rates. Zero once the
// lease is lost.
func (l *Lease) HeldUntil() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err != nil || l.heldSince.IsZero() {
		return time.Time{}
	}
	return l.heldSince.Add(l.TTL - l.TTL/10)
}

// start arms the keepalive. granted is when the grant was received: the
// lease is assumed valid for TTL from then. sent is when the request the
// grant answered was sent (HeldUntil counts from it).
func (l *Lease) start(ctx context.Context, b Transport, requestTimeout time.Duration, sent, granted time.Time) {
	// The lease outlives the Lock call: keep ctx's logger, not its end.
	l.ctx = context.WithoutCancel(ctx)
	l.transport = b
	l.requestTimeout = requestTimeout
	l.renewed = granted
	l.mu.Lock()
	l.heldSince = sent
	l.timer = time.AfterFunc(l.TTL/3, l.renew)
	l.mu.Unlock()
}

// stop ends the keepalive and waits for a renewal in flight. Idempotent. A
// Lease that was not made by Lock has no keepalive.
func (l *Lease) stop() {
	l.mu.Lock()
	if l.timer == nil {
		l.mu.Unlock()
		return
	}
	l.stopped = true
	l.timer.Stop()
	l.mu.Unlock()
	l.renewing.Wait()
}

// renew is the timer's function: one renewal, then it arms the timer for
// the next (sooner after a failure, as long as the lease can still be
// valid), or ends the keepalive when the lease is lost.
func (l *Lease) renew() {
	l.mu.Lock()
	if l.stopped {
		l.mu.Unlock()
		return
	}
	l.renewing.Add(1)
	l.mu.Unlock()
	defer l.renewing.Done()

	interval := l.TTL / 3
	sent := time.Now()
	expires := l.renewed.Add(l.TTL)
	deadline := sent.Add(l.requestTimeout)
	if expires.Before(deadline) {
		deadline = expires
	}
	cctx, cancel := context.WithDeadline(l.ctx, deadline)
	_, err := l.transport.Keepalive(cctx, api.KeepaliveRequest{Type: l.Type, ResourceID: l.ResourceID, LeaseID: l.ID, NodeID: l.NodeID})
	cancel()
	next := interval
	switch {
	case err == nil:
		l.renewed = sent
		l.mu.Lock()
		l.heldSince = sent
		l.mu.Unlock()
	case errors.Is(err, api.ErrNotHolder):
		l.lose(fmt.Errorf("%w: the coordinator no longer knows it: %w", ErrLeaseLost, err))
		return
	case !time.Now().Before(expires):
		l.lose(fmt.Errorf("%w: not renewed for %s: %w", ErrLeaseLost, l.TTL, err))
		return
	default:
		logger(l.ctx).WithError(err).Warn("lease renewal failed; retrying")
		next = min(interval/2, time.Until(expires))
	}
	l.mu.Lock()
	if !l.stopped {
		l.timer.Reset(next)
	}
	l.mu.Unlock()
}

// lose records why the lease lapsed, closes Lost and ends the keepalive,
// unless Unlock has already stopped it (then the lease was given back, not
// lost).
func (l *Lease) lose(err error) {
	l.mu.Lock()
	if l.stopped {
		l.mu.Unlock()
		return
	}
	l.err = err
	l.stopped = true
	if l.lost != nil {
		close(l.lost)
	}
	l.mu.Unlock()
	logger(l.ctx).WithError(err).Warn("lease lost")
}
