package lockserver

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/containerd/errdefs"
	"github.com/containerd/log"

	"github.com/sharedcontent/sharedcontent/lockserver/api"
	"github.com/sharedcontent/sharedcontent/refcount"
)

// A write the database refuses (a full disk, an I/O error) changes
// nothing: every method writes before it changes any state in memory or
// tells anyone, and answers 503 unavailable, so the client retries. The
// coordinator is unready (/readyz) from the first failed write until a
// write succeeds again; while it is, /readyz itself probes with a write,
// so it recovers once space returns, without traffic and without a
// restart.

// readinessKey is the StateStore key /readyz writes to while unready.
const readinessKey = "readiness_probe"

// wrote records the outcome of a database write and returns the error for
// the caller to answer: nil, a 503 for a failed write, or err unchanged
// when the write was refused for the request's own sake (a bad argument,
// a cancelled request).
func (s *store) wrote(ctx context.Context, err error) error {
	if err == nil {
		if s.failing.Load() && s.failing.CompareAndSwap(true, false) {
			log.G(ctx).Warn("the database accepts writes again; ready")
		}
		return nil
	}
	// api.ErrInvalidArgument is of errdefs' invalid-argument class.
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) || errdefs.IsInvalidArgument(err) {
		return err
	}
	s.metrics.writeFailures.Inc()
	if s.failing.CompareAndSwap(false, true) {
		log.G(ctx).WithError(err).Error("the database refused a write; unready until a write succeeds")
	}
	return fmt.Errorf("the coordinator cannot write its database: %w: %w", api.ErrUnavailable, err)
}

// Ready reports whether the coordinator can serve: nil, or an error
// matching api.ErrUnavailable while its database refuses writes.
func (c *Coordinator) Ready(ctx context.Context) error {
	return c.store.ready(ctx)
}

// ready is Ready: a failing store probes with a write.
func (s *store) ready(ctx context.Context) error {
	if !s.failing.Load() {
		return nil
	}
	return s.commit(ctx, new(refcount.Batch).PutString(readinessKey, s.now().UTC().Format(time.RFC3339Nano)))
}
