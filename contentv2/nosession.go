package contentv2

import (
	"context"
	"errors"
	"time"

	"github.com/containerd/log"
	"github.com/opencontainers/go-digest"
	"github.com/sharedcontent/sharedcontent/lockserver/api"
)

// A reference refused for want of a session (docs/design.md §8.4). The
// coordinator records a reference only for a node with a live session;
// it refuses one otherwise with api.ErrNoSession and records nothing (the
// session lapsed, the coordinator restarted or failed over and this node
// has not renewed since, or this node was forgotten). That is an answer,
// not an outage, so it never leads to a use without the reference
// (failOpenRefused): the store asks the session loop for a round now,
// waits for its answer, and tries once more; failing again, the caller
// gets ErrUnavailable and containerd retries. A pull's unlock refused so
// is retried the same way (the coordinator keeps the lock held meanwhile;
// should the retries fail, its expiry records the reference of a node
// live by then).

// kickSession asks the session loop for a round now.
func (s *store) kickSession() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// awaitSession asks the session loop for a round now and waits for the
// next session answer, at most a session interval and the coordination
// timeout (a round in flight ends first). It reports whether one arrived.
func (s *store) awaitSession(ctx context.Context) bool {
	s.smu.Lock()
	next := s.nextAnswer
	s.smu.Unlock()
	s.kickSession()
	t := time.NewTimer(s.sessionInterval() + s.coordTimeout)
	defer t.Stop()
	select {
	case <-next:
		return true
	case <-t.C:
	case <-ctx.Done():
	case <-s.stop:
	}
	return false
}

// afterSession runs call again, through coordinate, after refused, an
// api.ErrNoSession of op on dgst, each time the session loop has had an
// answer, at most noSessionRetries times (a session as short as a loaded
// machine's renewals may lapse again at once); else it returns the last
// refusal.
func (s *store) afterSession(ctx context.Context, op string, dgst digest.Digest, refused error, call func(context.Context) error) error {
	return s.againAfterSession(ctx, op, dgst, refused, func(ctx context.Context) error { return s.coordinate(ctx, call) })
}

// againAfterSession is afterSession sending retry as it is: a pull's
// unlock sent in the background (store.unlockLater) retries past the down
// mark, as it was sent first (docs/design.md §10.6).
func (s *store) againAfterSession(ctx context.Context, op string, dgst digest.Digest, refused error, retry func(context.Context) error) error {
	l := log.G(ctx).WithField("digest", dgst).WithField("node", s.nodeID).WithField("op", op)
	err := refused
	for range noSessionRetries {
		s.metrics.sessionRefusals.WithLabelValues("no_session").Inc()
		if !s.awaitSession(ctx) {
			l.WithError(err).Warn("the coordinator holds no live session of this node, and none was opened in time; the caller retries")
			return err
		}
		l.WithError(err).Info("the coordinator held no live session of this node: opened it again, trying once more")
		if err = retry(ctx); !errors.Is(err, api.ErrNoSession) {
			return err
		}
	}
	return err
}

// noSessionRetries bounds the retries of one call refused for want of a
// session.
const noSessionRetries = 3
