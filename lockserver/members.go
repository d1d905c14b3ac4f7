package lockserver

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/containerd/log"

	"github.com/sharedcontent/sharedcontent/internal/failpoint"
	"github.com/sharedcontent/sharedcontent/lockserver/api"
	"github.com/sharedcontent/sharedcontent/refcount"
)

// Membership (SPEC §8). A node is a member from its first session until it
// is forgotten (Forget, or NodeExpiry without a session). A member is
// synced while it holds a live session and the coordinator has received
// its full journal in that session; a delete is granted only while every
// member is synced, because an unsynced member's references may be
// missing (the coordinator restarted or lost its database, or the node
// used blobs while it could not reach the coordinator).
//
// Lock order: a shard's mutex, then Locker.mmu, then the refcount
// Manager's stripes.

// member is one node of the cluster. All fields are protected by
// Locker.mmu.
type member struct {
	rec refcount.Member
	// sessionUntil is when the session lapses; zero when the node has had
	// no session since this coordinator started.
	sessionUntil time.Time
	// synced: the journal was received in the current session.
	synced bool
	// sync is the full sync in progress, if any.
	sync *nodeSync
}

// nodeSync is a full sync being received.
type nodeSync struct {
	id   string
	refs map[string]struct{}
	// since records the node's own reference changes made after the sync
	// started (true: added, false: removed). They win over the chunks:
	// the node's snapshot may be older than them.
	since map[string]bool
}

// maxSyncRefs bounds the references one node may sync.
const maxSyncRefs = 1 << 24

func (m *member) live(now time.Time) bool {
	return !m.sessionUntil.IsZero() && now.Before(m.sessionUntil)
}

// loadMembers reads the persisted members: none is live or synced.
func (l *Locker) loadMembers(ctx context.Context) error {
	recs, err := l.state.ListMembers(ctx)
	if err != nil {
		return fmt.Errorf("lockserver: loading members: %w", err)
	}
	for _, r := range recs {
		l.members[r.ID] = &member{rec: r}
	}
	l.metrics.members.Set(float64(len(l.members)))
	return nil
}

// Session handles POST /nodes/session: it opens or renews the node's
// session, making it a member. A session that had lapsed starts unsynced.
func (l *Locker) Session(ctx context.Context, req api.SessionRequest) (api.SessionResponse, error) {
	if err := validateID("node_id", req.NodeID); err != nil {
		return api.SessionResponse{}, err
	}
	c := l.Cluster()
	if req.ClusterID != "" && req.ClusterID != c.ClusterID {
		return api.SessionResponse{}, wrongCluster(req.ClusterID, c)
	}
	now := l.now()
	l.mmu.Lock()
	defer l.mmu.Unlock()
	m := l.members[req.NodeID]
	if m == nil {
		m = &member{rec: refcount.Member{ID: req.NodeID, FirstSeen: now}}
	}
	if !m.live(now) {
		m.synced, m.sync = false, nil
	}
	if m.rec.LastSeen.IsZero() || now.Sub(m.rec.LastSeen) > l.persistSeenEvery() {
		rec := m.rec
		rec.LastSeen = now
		if err := l.wrote(ctx, l.state.PutMember(ctx, rec)); err != nil {
			return api.SessionResponse{}, fmt.Errorf("session of node %s: %w", req.NodeID, err)
		}
		m.rec = rec
	}
	if l.members[req.NodeID] == nil {
		l.members[req.NodeID] = m
		l.metrics.members.Set(float64(len(l.members)))
		log.G(ctx).WithField("node", req.NodeID).Info("new member")
	}
	m.sessionUntil = now.Add(l.cfg.SessionTTL)
	return api.SessionResponse{Cluster: c, SessionTTLMs: l.cfg.SessionTTL.Milliseconds(), Synced: m.synced}, nil
}

// persistSeenEvery is how stale a member's persisted LastSeen may get.
func (l *Locker) persistSeenEvery() time.Duration {
	return min(time.Minute, l.cfg.NodeExpiry/10)
}

// SyncRefs handles PUT /nodes/{id}/refs: one chunk of the node's full
// journal (api.SyncRequest). The last chunk replaces the node's references
// in one transaction and makes the node synced.
func (l *Locker) SyncRefs(ctx context.Context, nodeID string, req api.SyncRequest) (api.SyncResponse, error) {
	if err := validateID("node_id", nodeID); err != nil {
		return api.SyncResponse{}, err
	}
	if err := validateID("sync_id", req.SyncID); err != nil {
		return api.SyncResponse{}, err
	}
	if len(req.ResourceIDs) > api.MaxSyncChunk {
		return api.SyncResponse{}, fmt.Errorf("sync of node %s: %d resource IDs in one chunk, at most %d: %w",
			nodeID, len(req.ResourceIDs), api.MaxSyncChunk, api.ErrInvalidArgument)
	}
	for _, id := range req.ResourceIDs {
		if err := validateResourceID(id); err != nil {
			return api.SyncResponse{}, err
		}
	}
	now := l.now()
	l.mmu.Lock()
	defer l.mmu.Unlock()
	m := l.members[nodeID]
	if m == nil || !m.live(now) {
		return api.SyncResponse{}, fmt.Errorf("sync of node %s: no live session; open one first: %w", nodeID, api.ErrNotFound)
	}
	if m.sync == nil || m.sync.id != req.SyncID {
		m.sync = &nodeSync{id: req.SyncID, refs: map[string]struct{}{}, since: map[string]bool{}}
	}
	s := m.sync
	if len(s.refs)+len(req.ResourceIDs) > maxSyncRefs {
		m.sync = nil
		return api.SyncResponse{}, fmt.Errorf("sync of node %s: more than %d references: %w", nodeID, maxSyncRefs, api.ErrInvalidArgument)
	}
	for _, id := range req.ResourceIDs {
		s.refs[id] = struct{}{}
	}
	if !req.Done {
		return api.SyncResponse{Received: len(s.refs)}, nil
	}
	for id, added := range s.since {
		if added {
			s.refs[id] = struct{}{}
		} else {
			delete(s.refs, id)
		}
	}
	m.sync = nil
	failpoint.Inject(failpoint.CoordSyncBeforeReplace)
	if err := l.wrote(ctx, l.refs.ReplaceNode(ctx, nodeID, s.refs)); err != nil {
		return api.SyncResponse{}, fmt.Errorf("sync of node %s: %w", nodeID, err)
	}
	failpoint.Inject(failpoint.CoordSyncAfterReplace)
	m.synced = true
	log.G(ctx).WithField("node", nodeID).WithField("refs", len(s.refs)).Info("node synced")
	return api.SyncResponse{Received: len(s.refs), Synced: true}, nil
}

// noteRef tells a sync in progress of node that node itself added (or
// dropped) a reference, so that the sync's replacement keeps the change.
// Callers hold the resource's shard mutex and call it before they write
// the change.
func (l *Locker) noteRef(node, resourceID string, added bool) {
	l.mmu.Lock()
	defer l.mmu.Unlock()
	if m := l.members[node]; m != nil && m.sync != nil {
		m.sync.since[resourceID] = added
	}
}

// unsynced returns the members that are not synced now, sorted.
func (l *Locker) unsynced(now time.Time) []string {
	l.mmu.Lock()
	defer l.mmu.Unlock()
	var out []string
	for id, m := range l.members {
		if !m.synced || !m.live(now) {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return out
}

// checkSynced is the second half of the delete rule: every member synced.
func (l *Locker) checkSynced(resourceID string, now time.Time) error {
	if nodes := l.unsynced(now); len(nodes) > 0 {
		l.metrics.unsyncedRefusals.Inc()
		return &api.UnsyncedError{ResourceID: resourceID, Nodes: nodes}
	}
	return nil
}

// Forget handles DELETE /nodes/{id} (admin): the node stops being a
// member and its references are dropped. A node with a live session is
// refused: it would be a member again at its next keepalive, without its
// references.
func (l *Locker) Forget(ctx context.Context, nodeID string) error {
	if err := validateID("node_id", nodeID); err != nil {
		return err
	}
	l.mmu.Lock()
	defer l.mmu.Unlock()
	if m := l.members[nodeID]; m != nil && m.live(l.now()) {
		return fmt.Errorf("node %s has a live session; stop it before forgetting it: %w", nodeID, api.ErrMemberLive)
	}
	return l.forgetLocked(ctx, nodeID, "forgotten by an operator")
}

// forgetLocked drops the member and its references. Callers hold mmu.
func (l *Locker) forgetLocked(ctx context.Context, nodeID, why string) error {
	failpoint.Inject(failpoint.CoordForgetBeforeRefs)
	if err := l.wrote(ctx, l.refs.ReplaceNode(ctx, nodeID, nil)); err != nil {
		return fmt.Errorf("forget node %s: %w", nodeID, err)
	}
	failpoint.Inject(failpoint.CoordForgetAfterRefs)
	if err := l.wrote(ctx, l.state.DeleteMember(ctx, nodeID)); err != nil {
		return fmt.Errorf("forget node %s: %w", nodeID, err)
	}
	failpoint.Inject(failpoint.CoordForgetAfterMember)
	delete(l.members, nodeID)
	l.metrics.members.Set(float64(len(l.members)))
	log.G(ctx).WithField("node", nodeID).WithField("reason", why).Warn("member forgotten; its references are dropped")
	return nil
}

// Nodes handles GET /nodes: every member and its state.
func (l *Locker) Nodes(context.Context) (api.NodesResponse, error) {
	now := l.now()
	l.mmu.Lock()
	defer l.mmu.Unlock()
	out := api.NodesResponse{Cluster: l.Cluster(), Nodes: make([]api.NodeStatus, 0, len(l.members))}
	for _, m := range l.members {
		seen := m.rec.LastSeen
		if m.live(now) {
			seen = now
		}
		out.Nodes = append(out.Nodes, api.NodeStatus{
			NodeID: m.rec.ID, Live: m.live(now), Synced: m.synced && m.live(now),
			FirstSeen: m.rec.FirstSeen.UTC().Format(time.RFC3339Nano), LastSeen: seen.UTC().Format(time.RFC3339Nano),
		})
	}
	slices.SortFunc(out.Nodes, func(a, b api.NodeStatus) int { return strings.Compare(a.NodeID, b.NodeID) })
	return out, nil
}

// expireMembers forgets the members that have had no session for
// NodeExpiry.
func (l *Locker) expireMembers(ctx context.Context, now time.Time) {
	l.mmu.Lock()
	defer l.mmu.Unlock()
	for id, m := range l.members {
		last := m.rec.LastSeen
		if m.sessionUntil.After(last) {
			last = m.sessionUntil
		}
		if m.live(now) || now.Sub(last) < l.cfg.NodeExpiry {
			continue
		}
		if err := l.forgetLocked(ctx, id, fmt.Sprintf("no session for %s (node_expiry)", l.cfg.NodeExpiry)); err != nil {
			log.G(ctx).WithError(err).WithField("node", id).Error("expiring member")
		}
	}
}

// memberLoop expires members until the Locker closes.
func (l *Locker) memberLoop() {
	defer l.wg.Done()
	t := time.NewTicker(max(10*time.Millisecond, min(time.Minute, l.cfg.NodeExpiry/10)))
	defer t.Stop()
	for {
		select {
		case <-l.stop:
			return
		case <-t.C:
			l.expireMembers(context.Background(), l.now())
		}
	}
}
