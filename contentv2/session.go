package contentv2

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/containerd/errdefs"
	"github.com/containerd/log"

	"github.com/sharedcontent/sharedcontent/internal/failpoint"
)

// Sessions (SPEC §8). The store holds a session with the coordinator and
// renews it every TTL/3. When the coordinator says the node is not synced
// (its first session, a session that lapsed, a coordinator restart or
// adoption), the store sends its whole journal. The cluster the node
// belongs to is the shared root's (cluster.json): a coordinator of another
// cluster is treated as unreachable.
//
// A node that cannot reach the coordinator uses blobs without registering
// them only once its session has surely expired in the coordinator's eyes:
// failOpenDelay after it received the last successful session answer. From
// then on the coordinator refuses every delete until this node syncs, and
// the journal carries those uses to it.

// failOpenDelay is how long after the last session answer a node waits
// before it uses blobs unreferenced: the session TTL, a tenth more for
// clock rate, and failOpenMargin for a delete granted just before the
// session lapsed (a deleter checks its lease right before it renames).
func failOpenDelay(ttl time.Duration) time.Duration { return ttl + ttl/10 + failOpenMargin }

const failOpenMargin = 2 * time.Second

// startSession binds the store to the root's cluster and opens the first
// session. A coordinator of another cluster is a *WrongClusterError: the
// node must not start. An unreachable one is not an error: the store
// starts, treating it as unreachable, and keeps trying.
func (s *store) startSession(ctx context.Context) error {
	rootID, err := ReadClusterID(s.root)
	if err != nil {
		return err
	}
	s.smu.Lock()
	s.clusterID = rootID
	s.lastAck = time.Now() // a session of an earlier run may still be live
	s.smu.Unlock()
	cctx, cancel := context.WithTimeout(ctx, s.coordTimeout)
	defer cancel()
	err = s.sessionRound(cctx)
	var wrong *WrongClusterError
	if errors.As(err, &wrong) {
		return err
	}
	if errors.Is(err, ErrWrongCluster) {
		return &WrongClusterError{Root: s.root, RootCluster: rootID, Cause: err}
	}
	if err != nil {
		log.G(ctx).WithError(err).Warn("coordinator not reachable at start; deletes wait, writes go on after the session timeout")
	}
	// Only a node that may serve this root becomes a member of it (an
	// unreachable coordinator is no reason to refuse).
	return WriteNodeMarker(s.root, s.nodeID)
}

// sessionLoop renews the session until the store closes.
func (s *store) sessionLoop() {
	defer s.wg.Done()
	t := time.NewTimer(s.sessionInterval())
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
		case <-s.kick:
		}
		ctx, cancel := context.WithTimeout(context.Background(), s.sessionInterval())
		if err := s.sessionRound(ctx); err != nil {
			l := log.L.WithError(err).WithField("node", s.nodeID)
			if errors.Is(err, ErrWrongCluster) {
				l.Error("the coordinator belongs to another cluster than the shared root: no deletes until an operator adopts the root (sharedcontentctl cluster adopt)")
			} else {
				l.Warn("session renewal failed")
			}
		}
		cancel()
		t.Reset(s.sessionInterval())
	}
}

func (s *store) sessionInterval() time.Duration {
	s.smu.Lock()
	defer s.smu.Unlock()
	return max(s.sessionTTL/3, 10*time.Millisecond)
}

// sessionRound renews the session and syncs the journal when the
// coordinator asks for it.
func (s *store) sessionRound(ctx context.Context) error {
	s.smu.Lock()
	clusterID := s.clusterID
	s.smu.Unlock()
	info, err := s.coord.Session(ctx, clusterID)
	if err != nil {
		s.setSynced(false)
		return err
	}
	failpoint.Inject(failpoint.StoreSessionAnswered)
	received := time.Now()
	if clusterID == "" {
		// The first node of a new root records the coordinator's cluster.
		rootID, err := claimRoot(s.root, info.ClusterID, s.nodeID)
		if err != nil {
			return err
		}
		if rootID != info.ClusterID {
			return &WrongClusterError{Root: s.root, RootCluster: rootID, CoordinatorCluster: info.ClusterID}
		}
		s.smu.Lock()
		s.clusterID = rootID
		s.smu.Unlock()
		// Bind the coordinator to it from now on.
		if info, err = s.coord.Session(ctx, rootID); err != nil {
			return err
		}
	}
	if err := s.journal.setMember(info.ClusterID); err != nil {
		return err
	}
	s.mu.Lock()
	s.downUntil = time.Time{} // it answers again
	s.mu.Unlock()
	s.smu.Lock()
	s.lastAck = received
	s.sessionTTL = info.TTL
	if info.Epoch != s.epoch && s.epoch != 0 {
		log.L.WithField("node", s.nodeID).WithField("epoch", info.Epoch).Info("coordinator restarted; syncing the journal")
	}
	s.epoch = info.Epoch
	s.smu.Unlock()
	if info.Synced {
		s.setSynced(true)
		return nil
	}
	s.setSynced(false)
	if err := s.coord.SyncRefs(ctx, s.journal.snapshot); err != nil {
		return err
	}
	s.setSynced(true)
	s.metrics.syncs.Inc()
	return nil
}

func (s *store) setSynced(v bool) {
	s.smu.Lock()
	s.synced = v
	s.smu.Unlock()
	if v {
		s.metrics.synced.Set(1)
	} else {
		s.metrics.synced.Set(0)
	}
}

// failOpenRefused says why this node may not use a blob without the
// coordinator after cause, or returns nil when it may. It may only when
//   - the coordinator could not be reached: one that answered and refused
//     this node's credentials (unauthenticated, forbidden) is no outage,
//     and the node goes on failing until its credentials are fixed;
//   - this node is a member of the root's cluster: that cluster's
//     coordinator accepted a session of it once (the journal records it).
//     A node it never counted has no session to lapse, and no delete
//     would wait for it;
//   - its session has surely expired: failOpenDelay after the last
//     session answer. Until then the error is ErrUnavailable and says how
//     long, so containerd retries.
func (s *store) failOpenRefused(cause error) error {
	if errdefs.IsUnauthorized(cause) || errdefs.IsPermissionDenied(cause) {
		return fmt.Errorf("the coordinator refuses this node (%w); no blob is used without it: fix this node's credentials", cause)
	}
	s.smu.Lock()
	cluster := s.clusterID
	wait := time.Until(s.lastAck.Add(failOpenDelay(s.sessionTTL)))
	s.smu.Unlock()
	if member := s.journal.memberOf(); cluster == "" || member != cluster {
		return fmt.Errorf("coordinator unreachable (%w), and this node has never joined the cluster of its root (%s): no blob is used without the coordinator until it has: %w",
			cause, or(cluster, "none yet"), errdefs.ErrUnavailable)
	}
	if wait > 0 {
		return fmt.Errorf("coordinator unreachable (%w); uncoordinated use starts in %s, once this node's session has surely expired: %w",
			cause, wait.Round(time.Millisecond), errdefs.ErrUnavailable)
	}
	return nil
}

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
