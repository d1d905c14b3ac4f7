package contentv2

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/containerd/errdefs"
	"github.com/containerd/log"

	"github.com/sharedcontent/sharedcontent/internal/failpoint"
	"github.com/sharedcontent/sharedcontent/lockserver/api"
)

// Sessions (docs/design.md §8.3). The store holds a session with the coordinator and
// renews it every TTL/3. When the coordinator says the node is not synced
// (its first session, a session that lapsed, a coordinator restart or
// adoption), the store sends its whole journal. The cluster the node
// belongs to is the shared root's (cluster.json): a coordinator of another
// cluster is treated as unreachable.
//
// The timing rule (docs/design.md §8.8): a renewal echoes
// the coordinator's stamp of the last answer received and the time
// elapsed since, and is sent only while that is at most 2·TTL/3 (after
// that the store opens a new session, which starts unsynced). The
// coordinator extends nothing for a renewal that arrives more than TTL/3
// after it was sent. So a node that cannot reach the coordinator uses
// blobs without registering them only FailOpenDelay after it sent its last
// renewal, answered or not: its session has surely expired by then. From
// then on the coordinator refuses every delete until this node syncs, and
// the journal carries those uses to it.

// FailOpenDelay is how long after its last renewal a node cut off from the
// coordinator waits before it uses blobs unreferenced: TTL/3 (the latest a
// renewal may arrive and still count), the session TTL it then grants, a
// tenth of the TTL for clock rate, and failOpenMargin for a delete granted
// just before the session lapsed (a deleter checks its lease right before
// it renames).
func FailOpenDelay(ttl time.Duration) time.Duration { return ttl/3 + ttl + ttl/10 + failOpenMargin }

const failOpenMargin = 2 * time.Second

// sessionAnswer is what the store keeps of the last session answer.
type sessionAnswer struct {
	at    time.Time // when it arrived (zero: none to echo)
	stamp time.Duration
	epoch uint64
}

// startSession binds the store to the root's cluster and opens the first
// session. A coordinator of another cluster is a *WrongClusterError: the
// node must not start; so is another live instance with this node ID
// (api.ErrDuplicateNode), once this node has waited out a session its own
// previous run may have left. An unreachable coordinator is not an error:
// the store starts, treating it as unreachable, and keeps trying.
func (s *store) startSession(ctx context.Context) error {
	rootID, err := ReadClusterID(s.root)
	if err != nil {
		return err
	}
	s.smu.Lock()
	s.clusterID = rootID
	s.sessionTTL = s.journal.announcedTTL()
	s.renewalSent = time.Now() // a session of an earlier run may still be live
	s.smu.Unlock()
	s.noteRenewalSent(s.renewalSent)
	err = s.firstSession(ctx)
	var wrong *WrongClusterError
	switch {
	case errors.As(err, &wrong):
		return err
	case errors.Is(err, api.ErrWrongCluster):
		return &WrongClusterError{Root: s.root, RootCluster: rootID, Cause: err}
	case errors.Is(err, api.ErrDuplicateNode):
		return fmt.Errorf("node %s: %w; refusing to start", s.nodeID, err)
	case errors.Is(err, api.ErrRootClaimed):
		// The cluster has a root, and this is not it: the node refuses to
		// start, having written nothing to it (docs/design.md §8.19).
		var re *RootError
		if errors.As(err, &re) {
			at := *re
			at.running = false
			return &at
		}
		return err
	case errdefs.IsUnauthorized(err) || errdefs.IsPermissionDenied(err):
		// An answer, not an outage: this node's credentials are not its
		// own (a token of another node) or not accepted. Waiting cannot
		// fix that; an operator must.
		return fmt.Errorf("node %s: the coordinator refuses this node (%w); refusing to start: give this node its own credentials (--node-token-file, --node-cert) or fix --node-id", s.nodeID, err)
	case err != nil:
		s.logNoSessionAtStart(ctx, err)
	}
	// Only a node that may serve this root becomes a member of it (an
	// unreachable coordinator is no reason to refuse); on a root not
	// claimed yet, once the claim is accepted (claim).
	return s.writeMarkerOnce()
}

// writeMarkerOnce writes this node's marker into the root, creating the
// directory, the first time the root has a cluster. Only startSession and
// the session rounds call it.
func (s *store) writeMarkerOnce() error {
	s.smu.Lock()
	cluster := s.clusterID
	s.smu.Unlock()
	if s.markerWritten || cluster == "" {
		return nil
	}
	if err := WriteNodeMarker(s.root, s.nodeID); err != nil {
		return err
	}
	s.markerWritten = true
	return nil
}

// logNoSessionAtStart says what the store does while the coordinator has
// not given it a session since it started, by failOpenRefused's rules: a
// member fails open once the session its previous run may have left has
// surely expired (counted from now); a node that never joined its root's
// cluster, or one the coordinator refuses, never does.
func (s *store) logNoSessionAtStart(ctx context.Context, err error) {
	l := log.G(ctx).WithError(err).WithField("node", s.nodeID)
	switch {
	case errors.Is(err, api.ErrLate):
		// The coordinator answered: only the timing rule (docs/design.md
		// §8.8) refused the round, and the session loop runs the next.
		l.Warn("the session round at start reached the coordinator too late (a slow network or a loaded machine): this node is not synced yet; the next round tries again")
	case !s.joined():
		l.Warn("coordinator not reachable at start, and this node has never joined its root's cluster: writes and deletes wait until the coordinator answers")
	default:
		l.WithField("fail_open_in", FailOpenDelay(s.failOpenTTL())).
			Warn("coordinator not reachable at start: deletes wait; writes go on uncoordinated once this node's session has surely expired (fail_open_in), unless the coordinator answers first")
	}
}

// firstSession runs the first session round. While the coordinator says
// another instance of this node ID is live, it retries until any session
// of this node's previous run has surely lapsed: then the other instance
// is a live one (another host with the same node ID). A previous run
// that closed cleanly ended its session (endSession), so this waits only
// after a crash, or a close that could not reach the coordinator.
func (s *store) firstSession(ctx context.Context) error {
	deadline := time.Now().Add(s.failOpenTTL() + s.failOpenTTL()/10)
	for {
		cctx, cancel := context.WithTimeout(ctx, s.coordTimeout)
		err := s.sessionRound(cctx)
		cancel()
		if !errors.Is(err, api.ErrDuplicateNode) || time.Now().After(deadline) {
			return err
		}
		log.G(ctx).WithError(err).WithField("node", s.nodeID).Warn("another instance holds this node's session; waiting for it to lapse (a previous run of this node) or refusing to start")
		select {
		case <-time.After(max(s.sessionInterval()/2, 10*time.Millisecond)):
		case <-ctx.Done():
			return err
		}
	}
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
			switch {
			case errors.Is(err, api.ErrWrongCluster):
				l.Error("the coordinator belongs to another cluster than the shared root: no deletes until an operator adopts the root (sharedcontentctl cluster adopt)")
			case errors.Is(err, api.ErrDuplicateNode):
				l.Error("ANOTHER LIVE INSTANCE USES THIS NODE ID: this node uses no blob without the coordinator until it is fixed; give each host a unique --node-id")
			default:
				l.Warn("session renewal failed")
			}
		}
		cancel()
		// Answered or not, this node is alive; but its marker goes only
		// into a verified root (docs/design.md §8.19).
		if s.rootw.ready() == nil && s.markerWritten {
			s.refreshMarker()
		}
		t.Reset(s.nextRound())
	}
}

// endSessionTimeout bounds the end of the session at Close: it is best
// effort (the session lapses by itself otherwise), and a daemon shutting
// down must not hang on a coordinator that does not answer.
const endSessionTimeout = 2 * time.Second

// endSession ends this instance's session at the coordinator, once the
// session loop has stopped (no renewal after it reopens the session), so
// that this node's next start is not refused as a duplicate until the
// session lapses. Best effort: a failure is logged, and the session then
// lapses after its TTL as after a crash. A store that never had an answer
// from a coordinator in this run has no session to end.
func (s *store) endSession() {
	s.smu.Lock()
	answered := s.epoch != 0
	s.smu.Unlock()
	if !answered {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), endSessionTimeout)
	defer cancel()
	l := log.G(ctx).WithField("node", s.nodeID).WithField("instance", s.instanceID)
	ended, err := s.coord.EndSession(ctx, s.instanceID)
	switch {
	case err != nil:
		l.WithError(err).Warn("could not end this node's session at close; its next start waits for it to lapse")
	case ended:
		l.Info("session ended at close")
	}
}

func (s *store) sessionInterval() time.Duration {
	s.smu.Lock()
	defer s.smu.Unlock()
	return max(s.coordTTL()/3, 10*time.Millisecond)
}

// coordTTL is the coordinator's session TTL as last announced, or the
// configured one. Callers hold smu.
func (s *store) coordTTL() time.Duration {
	if s.sessionTTL > 0 {
		return s.sessionTTL
	}
	return s.configTTL
}

// failOpenTTL is the TTL the fail-open delay counts with: the larger of
// the configured one and the last one a coordinator announced.
func (s *store) failOpenTTL() time.Duration {
	s.smu.Lock()
	defer s.smu.Unlock()
	return max(s.configTTL, s.sessionTTL)
}

// echo returns the echo for a renewal (or a sync's last chunk) sent now,
// and records the send; nil when there is no answer to echo, or the last
// one is more than 2·TTL/3 old (then the message would be late).
func (s *store) echo() *Echo {
	now := time.Now()
	s.smu.Lock()
	a := s.answer
	if a.at.IsZero() || now.Sub(a.at) > 2*s.coordTTL()/3 {
		s.smu.Unlock()
		return nil
	}
	s.renewalSent = now
	s.smu.Unlock()
	s.noteRenewalSent(now)
	return &Echo{Epoch: a.epoch, Stamp: a.stamp, Elapsed: now.Sub(a.at)}
}

func (s *store) noteRenewalSent(at time.Time) {
	s.metrics.renewalSent.Set(float64(at.UnixNano()) / 1e9)
	s.metrics.failOpenDelay.Set(FailOpenDelay(s.failOpenTTL()).Seconds())
}

// session opens or renews the session: a renewal refused as late is
// followed at once by an open.
func (s *store) session(ctx context.Context, clusterID string) (SessionInfo, error) {
	req := SessionRequest{ClusterID: clusterID, InstanceID: s.instanceID, Generation: s.journal.generation, Echo: s.echo(),
		Unclaimed: clusterID == ""}
	if id, _ := s.rootw.expected(); clusterID != "" && id.known() {
		req.Root = id.claim()
	}
	info, err := s.coord.Session(ctx, req)
	if errors.Is(err, api.ErrLate) && req.Echo != nil {
		s.metrics.sessionRefusals.WithLabelValues("late").Inc()
		log.G(ctx).WithError(err).WithField("node", s.nodeID).Warn("session renewal arrived late; opening a new session")
		req.Echo = nil
		info, err = s.coord.Session(ctx, req)
	}
	duplicate := errors.Is(err, api.ErrDuplicateNode)
	s.smu.Lock()
	s.duplicate = duplicate
	s.smu.Unlock()
	if duplicate {
		s.metrics.sessionRefusals.WithLabelValues("duplicate_node").Inc()
	}
	if errors.Is(err, api.ErrRootClaimed) {
		s.metrics.sessionRefusals.WithLabelValues("root_claimed").Inc()
		id, _ := s.rootw.expected()
		if clusterID == "" {
			id = rootIdentity{}
		}
		err = s.rootw.refuseRoot(err, id)
	}
	return info, err
}

// sessionRound renews the session and syncs the journal when the
// coordinator asks for it.
func (s *store) sessionRound(ctx context.Context) error {
	clusterID, err := s.rootCluster(ctx)
	if err != nil {
		s.setSynced(false)
		return err
	}
	info, err := s.session(ctx, clusterID)
	if err != nil {
		s.setSynced(false)
		return err
	}
	failpoint.Inject(failpoint.StoreSessionAnswered)
	received := time.Now()
	if clusterID == "" {
		if info, err = s.claim(ctx, info); err != nil {
			return err
		}
		received = time.Now()
	}
	if err := s.answered(ctx, info, received); err != nil {
		return err
	}
	if err := s.settleForgotten(ctx); err != nil {
		s.setSynced(false)
		return err
	}
	if info.Synced {
		s.setSynced(true)
		if err := s.journal.setMember(info.ClusterID); err != nil {
			return err
		}
		return s.recordRoot(ctx)
	}
	s.setSynced(false)
	if s.deferSync(received) {
		return nil // the next round, at syncAt, syncs
	}
	if err := s.seedJournal(ctx); err != nil {
		return err
	}
	err = s.coord.SyncRefs(ctx, SyncRequest{Generation: s.journal.generation, Snapshot: s.journal.snapshot, Echo: s.echo})
	if err != nil {
		if errors.Is(err, api.ErrLate) {
			s.metrics.sessionRefusals.WithLabelValues("late").Inc()
			s.smu.Lock()
			s.answer = sessionAnswer{} // the next round opens a new session
			s.smu.Unlock()
		}
		return err
	}
	// A member, and so a node that may fail open, only once a sync of it
	// completed: until then the coordinator need not wait for it
	// (lockserver/bystander.go).
	if err := s.journal.setMember(info.ClusterID); err != nil {
		return err
	}
	s.setSynced(true)
	s.metrics.syncs.Inc()
	return s.recordRoot(ctx)
}

// answered records a session answer received at received: its stamp, the
// announced TTL (in the journal too), and whether the coordinator had
// forgotten this node (forgotten.go), once for the answers that say so
// until the node's sync completes.
func (s *store) answered(ctx context.Context, info SessionInfo, received time.Time) error {
	forgotten := info.NewMember && s.journal.memberOf() == info.ClusterID
	if err := s.journal.setAnnouncedTTL(info.TTL); err != nil {
		return err
	}
	s.mu.Lock()
	if !s.slow {
		s.downUntil = time.Time{} // it answers again (a slow one's mark runs out: coordinate)
	}
	s.mu.Unlock()
	s.smu.Lock()
	s.answer = sessionAnswer{at: received, stamp: info.Stamp, epoch: info.Epoch}
	s.sessionTTL = info.TTL
	s.failedOpen = time.Time{}
	if info.Epoch != s.epoch && s.epoch != 0 {
		log.L.WithField("node", s.nodeID).WithField("epoch", info.Epoch).Info("coordinator restarted; syncing the journal")
		s.restarted = true
	}
	s.epoch = info.Epoch
	forgotten = forgotten && !s.forgottenTold // told before, until the node synced
	s.forgottenTold = info.NewMember && (forgotten || s.forgottenTold)
	close(s.nextAnswer)
	s.nextAnswer = make(chan struct{})
	s.smu.Unlock()
	s.metrics.failOpenSince.Set(0)
	s.metrics.failOpenDelay.Set(FailOpenDelay(s.failOpenTTL()).Seconds())
	if forgotten {
		return s.cameBackForgotten(ctx, info.ClusterID)
	}
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
//     this node's credentials (unauthenticated, forbidden), or its session
//     because another live instance uses its node ID, is no outage, and
//     the node goes on failing until that is fixed;
//   - this node is a member of the root's cluster: that cluster's
//     coordinator accepted a session of it once (the journal records it).
//     A node it never counted has no session to lapse, and no delete
//     would wait for it;
//   - its session has surely expired: FailOpenDelay after the last
//     renewal it sent. Until then the error is ErrUnavailable and says
//     how long, so containerd retries.
func (s *store) failOpenRefused(cause error) error {
	if errdefs.IsUnauthorized(cause) || errdefs.IsPermissionDenied(cause) {
		return fmt.Errorf("the coordinator refuses this node (%w); no blob is used without it: fix this node's credentials", cause)
	}
	ttl := s.failOpenTTL()
	now := time.Now()
	s.smu.Lock()
	cluster, duplicate := s.clusterID, s.duplicate
	wait := s.renewalSent.Add(FailOpenDelay(ttl)).Sub(now)
	s.smu.Unlock()
	if duplicate {
		return fmt.Errorf("the coordinator refuses this node's session: another live instance uses node id %s (%w); no blob is used without the coordinator: give each host a unique --node-id: %w",
			s.nodeID, cause, api.ErrDuplicateNode)
	}
	if !s.joined() {
		return fmt.Errorf("coordinator unreachable (%w), and this node has never joined the cluster of its root (%s): no blob is used without the coordinator until it has: %w",
			cause, or(cluster, "none yet"), errdefs.ErrUnavailable)
	}
	if wait > 0 {
		return fmt.Errorf("coordinator unreachable (%w); uncoordinated use starts in %s, once this node's session has surely expired: %w",
			cause, wait.Round(time.Millisecond), errdefs.ErrUnavailable)
	}
	s.smu.Lock()
	if s.failedOpen.IsZero() {
		s.failedOpen = now
		s.metrics.failOpenSince.Set(float64(now.UnixNano()) / 1e9)
	}
	s.smu.Unlock()
	return nil
}

// joined reports whether this node is a member of its root's cluster:
// that cluster's coordinator completed a sync of it once (the journal
// records it).
func (s *store) joined() bool {
	s.smu.Lock()
	cluster := s.clusterID
	s.smu.Unlock()
	return cluster != "" && s.journal.memberOf() == cluster
}

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// recordRoot records, once, the shared root this node has joined
// (docs/design.md §8.19): from its next start on it serves only that root.
// Only the session loop (and the first round) call it.
func (s *store) recordRoot(ctx context.Context) error {
	if s.rootRecorded {
		return nil
	}
	if err := s.rootw.check(ctx); err != nil {
		return nil // recorded at a later round, once the root checks out
	}
	id, mount := s.rootw.expected()
	if !id.known() {
		var err error
		if id, err = readRootIdentity(s.root); err != nil || !id.known() {
			return err
		}
		s.rootw.setExpect(id)
	}
	r := RootRecord{Path: s.root, ClusterID: id.ClusterID, CreatedAt: id.CreatedAt, Mount: mount, RecordedAt: time.Now().UTC()}
	if err := writeRootRecord(s.stateDir, r); err != nil {
		return err
	}
	s.rootRecorded = true
	log.G(ctx).WithField("node", s.nodeID).WithField("root", s.root).WithField("cluster", id.ClusterID).WithField("mount", mount).
		Info("recorded the shared root this node joined; it serves no other from now on")
	return nil
}

// rootCluster returns the cluster of the root this node serves: the one
// it started on or claimed, or, on a root that had no cluster file, the
// one of the cluster file that appeared since (the shared storage was
// mounted meanwhile, or another first node claimed the root); "" while the
// root has none.
func (s *store) rootCluster(ctx context.Context) (string, error) {
	s.smu.Lock()
	cluster := s.clusterID
	s.smu.Unlock()
	if cluster != "" {
		return cluster, nil
	}
	var id rootIdentity
	err := s.guard.do(ctx, "root_identity", func() (err error) {
		id, err = readRootIdentity(s.root)
		return err
	})
	if err != nil || !id.known() {
		return "", err
	}
	s.rootw.setExpect(id)
	s.smu.Lock()
	s.clusterID = id.ClusterID
	s.smu.Unlock()
	return id.ClusterID, s.writeMarkerOnce()
}

// claim records the coordinator's cluster in a root that has no cluster
// file (the coordinator accepted the claim: the cluster has no root yet),
// on a root that still checks out, and names the root to the coordinator
// in the same round. Two first nodes on one root agree (the cluster file
// is hard-linked: one wins, and the other reads it); two on roots of
// their own (one not mounted) each claim theirs, and the coordinator
// keeps the first root named: the other node removes its cluster file
// and is refused (docs/design.md §8.19).
func (s *store) claim(ctx context.Context, info SessionInfo) (SessionInfo, error) {
	if err := s.rootw.check(ctx); err != nil {
		return info, err
	}
	id, created, err := claimRoot(s.root, info.ClusterID, s.nodeID)
	if err != nil {
		return info, err
	}
	if id.ClusterID != info.ClusterID {
		return info, &WrongClusterError{Root: s.root, RootCluster: id.ClusterID, CoordinatorCluster: info.ClusterID}
	}
	s.rootw.setExpect(id)
	s.smu.Lock()
	s.clusterID = id.ClusterID
	s.smu.Unlock()
	// Bind the coordinator to the cluster from now on, and name the root.
	info, err = s.session(ctx, id.ClusterID)
	if errors.Is(err, api.ErrRootClaimed) && created {
		// Another root of the cluster was named first: this node's root
		// is left as it was, unclaimed.
		if uerr := unclaimRoot(s.root, id); uerr != nil {
			log.G(ctx).WithError(uerr).WithField("root", s.root).Error("could not remove the cluster file this node created in a root the coordinator refused; remove it")
		}
		s.smu.Lock()
		s.clusterID = ""
		s.smu.Unlock()
		s.rootw.setExpect(rootIdentity{})
		var re *RootError
		if errors.As(err, &re) {
			err = s.rootw.refuseRoot(re.Cause, rootIdentity{})
		}
	}
	if err != nil {
		return info, err
	}
	if created {
		log.G(ctx).WithField("node", s.nodeID).WithField("root", s.root).WithField("cluster", id.ClusterID).
			Info("claimed the shared root for the new cluster")
	}
	return info, s.writeMarkerOnce()
}
