package scale

import (
	"context"
	"errors"
	"time"

	"github.com/sharedcontent/sharedcontent/contentv2"
	"github.com/sharedcontent/sharedcontent/lockserver/api"
)

// sessionState is what a node knows of its session, as contentv2's store
// keeps it (contentv2/session.go).
type sessionState struct {
	clusterID string
	epoch     uint64
	ttl       time.Duration
	answerAt  time.Time     // when the last session answer arrived
	stamp     time.Duration // its stamp, echoed back
	synced    bool          // the coordinator has the journal, this epoch
	syncedAt  time.Time
	maxGap    time.Duration // longest time between two session answers
}

// defaultTTL is the session TTL until the first answer announces one.
const defaultTTL = 15 * time.Second

func (n *node) interval() time.Duration {
	n.mu.Lock()
	defer n.mu.Unlock()
	ttl := n.session.ttl
	if ttl == 0 {
		ttl = defaultTTL
	}
	return max(ttl/3, 10*time.Millisecond)
}

// echo is contentv2's: nil with no answer to echo, or one older than
// 2·TTL/3.
func (n *node) echo() *contentv2.Echo {
	now := time.Now()
	n.mu.Lock()
	defer n.mu.Unlock()
	s := n.session
	if s.answerAt.IsZero() || now.Sub(s.answerAt) > 2*s.ttl/3 {
		return nil
	}
	return &contentv2.Echo{Epoch: s.epoch, Stamp: s.stamp, Elapsed: now.Sub(s.answerAt)}
}

// sessionRound renews (or opens) the session and syncs the journal when
// the coordinator does not have it, as contentv2's sessionRound does.
func (n *node) sessionRound(ctx context.Context) error {
	n.mu.Lock()
	clusterID := n.session.clusterID
	n.mu.Unlock()
	req := contentv2.SessionRequest{ClusterID: clusterID, InstanceID: n.instance, Echo: n.echo()}
	info, err := n.coord.Session(ctx, req)
	if errors.Is(err, api.ErrLate) && req.Echo != nil {
		req.Echo = nil
		info, err = n.coord.Session(ctx, req)
	}
	if err != nil {
		n.setSynced(false)
		return err
	}
	n.answered(info, time.Now())
	if info.Synced {
		n.setSynced(true)
		return nil
	}
	n.setSynced(false)
	n.mu.Lock()
	gen := n.generation
	n.mu.Unlock()
	err = n.coord.SyncRefs(ctx, contentv2.SyncRequest{Generation: gen, Snapshot: n.snapshot, Echo: n.echo})
	if err != nil {
		if errors.Is(err, api.ErrLate) {
			n.mu.Lock()
			n.session.answerAt = time.Time{} // the next round opens a new session
			n.mu.Unlock()
		}
		return err
	}
	n.setSynced(true)
	return nil
}

func (n *node) answered(info contentv2.SessionInfo, at time.Time) {
	n.mu.Lock()
	defer n.mu.Unlock()
	s := &n.session
	if !s.answerAt.IsZero() {
		s.maxGap = max(s.maxGap, at.Sub(s.answerAt))
	}
	if info.Epoch != s.epoch {
		s.synced = false
	}
	s.clusterID, s.epoch, s.ttl, s.answerAt, s.stamp = info.ClusterID, info.Epoch, info.TTL, at, info.Stamp
}

func (n *node) setSynced(v bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if v && !n.session.synced {
		n.session.syncedAt = time.Now()
	}
	n.session.synced = v
}

// syncedIn reports whether the node is synced in epoch, and since when.
func (n *node) syncedIn(epoch uint64) (bool, time.Time) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.session.synced && n.session.epoch == epoch, n.session.syncedAt
}

// gap returns the longest time the node went without a session answer,
// counting the time since its last one.
func (n *node) gap(now time.Time) time.Duration {
	n.mu.Lock()
	defer n.mu.Unlock()
	g := n.session.maxGap
	if !n.session.answerAt.IsZero() {
		g = max(g, now.Sub(n.session.answerAt))
	}
	return g
}

// resetGap forgets the gaps so far (after the setup of a scenario).
func (n *node) resetGap() {
	n.mu.Lock()
	n.session.maxGap = 0
	n.mu.Unlock()
}

// runSessions runs session rounds every TTL/3 until ctx ends; each round
// is bounded by the interval, as contentv2's session loop does.
func (n *node) runSessions(ctx context.Context) {
	for {
		rctx, cancel := context.WithTimeout(ctx, n.interval())
		_ = n.sessionRound(rctx)
		cancel()
		select {
		case <-ctx.Done():
			return
		case <-time.After(n.interval()):
		}
	}
}
