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
// changed. While it is held, a goroutine owned by the lease renews it every
// TTL/3; Unlock (or Client.Close) stops that goroutine and waits for it.
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
	Type       OperationType
	ResourceID string
	NodeID     string
	// TTL is the lease's lifetime without renewal.
	TTL time.Duration

	requestID string
	cancel    context.CancelFunc // stops the keepalive; set by start
	done      chan struct{}      // closed when the keepalive goroutine has returned
	lost      chan struct{}      // closed (once, by the keepalive goroutine) when the lease lapsed

	mu  sync.Mutex
	err error // protected by mu: why the lease was lost
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
		done:       make(chan struct{}),
		lost:       make(chan struct{}),
	}
}

// Lost returns a channel that closes when the lease lapsed while held: no
// renewal succeeded for a whole TTL (measured by the client from the grant
// or the last successful renewal), or the coordinator answered that it no
// longer knows the lease. It never closes after Unlock.
func (l *Lease) Lost() <-chan struct{} { return l.lost }

// Err returns nil while the lease is held, and an error matching
// ErrLeaseLost saying why once Lost has closed.
func (l *Lease) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

// start launches the keepalive goroutine. granted is when the grant was
// received: the lease is assumed valid for TTL from then.
func (l *Lease) start(ctx context.Context, b Backend, requestTimeout time.Duration, granted time.Time) {
	// The lease outlives the Lock call: keep ctx's logger, not its end.
	kctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	l.cancel = cancel
	go l.keepalive(kctx, b, requestTimeout, granted)
}

// stop ends the keepalive and waits for its goroutine. Idempotent. A
// Lease that was not made by Lock has no keepalive.
func (l *Lease) stop() {
	if l.cancel == nil {
		return
	}
	l.cancel()
	<-l.done
}

// keepalive renews the lease every TTL/3 until ctx ends or the lease is
// lost. After a failed renewal it tries again sooner, as long as the lease
// can still be valid.
func (l *Lease) keepalive(ctx context.Context, b Backend, requestTimeout time.Duration, renewed time.Time) {
	defer close(l.done)
	interval := l.TTL / 3
	timer := time.NewTimer(interval)
	defer timer.Stop()
	req := api.KeepaliveRequest{Type: l.Type, ResourceID: l.ResourceID, LeaseID: l.ID}
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		}
		sent := time.Now()
		expires := renewed.Add(l.TTL)
		deadline := sent.Add(requestTimeout)
		if expires.Before(deadline) {
			deadline = expires
		}
		cctx, cancel := context.WithDeadline(ctx, deadline)
		_, err := b.Keepalive(cctx, req)
		cancel()
		switch {
		case err == nil:
			renewed = sent
			timer.Reset(interval)
			continue
		case ctx.Err() != nil:
			return
		case errors.Is(err, ErrNotHolder):
			l.lose(ctx, fmt.Errorf("%w: the coordinator no longer knows it: %w", ErrLeaseLost, err))
			return
		case !time.Now().Before(expires):
			l.lose(ctx, fmt.Errorf("%w: not renewed for %s: %w", ErrLeaseLost, l.TTL, err))
			return
		}
		logger(ctx).WithError(err).Warn("lease renewal failed; retrying")
		timer.Reset(min(interval/2, time.Until(expires)))
	}
}

func (l *Lease) lose(ctx context.Context, err error) {
	l.mu.Lock()
	l.err = err
	l.mu.Unlock()
	close(l.lost)
	logger(ctx).WithError(err).Warn("lease lost")
}
