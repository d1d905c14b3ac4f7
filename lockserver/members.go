package lockserver

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/containerd/log"

	"github.com/sharedcontent/sharedcontent/internal/failpoint"
	"github.com/sharedcontent/sharedcontent/lockserver/api"
	"github.com/sharedcontent/sharedcontent/refcount"
)

// Membership (docs/design.md §8.4). A node is a member from its first session until it
// is forgotten: by an operator (Forget), or by the reaper once the node is
// shown gone (Expire, expire.go). Time alone never forgets it. A member is
// synced while it holds a live session and the coordinator has received
// its full journal in that session; a delete is granted only while every
// member is synced, because an unsynced member's references may be
// missing (the coordinator restarted or lost its database, or the node
// used blobs while it could not reach the coordinator).
//
// Lock order: a shard's mutex, then memberPart.mmu, then the refcount
// Manager's stripes.

// member is one node of the cluster. All fields are protected by
// memberPart.mmu.
type member struct {
	rec refcount.Member
	// sessionUntil is when the session lapses; zero when the node has had
	// no session since this coordinator started.
	sessionUntil time.Time
	// synced: the journal was received in the current session.
	synced bool
	// instance is the instance ID of the session's daemon ("" for an
	// older node, which is not checked).
	instance string
	// older: the last session was in the older shape, without an
	// instance ID (olderstreams.go).
	older bool
	// answered is when the coordinator last answered a session call of
	// the node (for a sync without an echo: timing.go).
	answered time.Time
	// vouchedUntil: for an older node (no instance ID, no echo:
	// olderrenewal.go), when what its last sync proves runs out; zero
	// for a node whose renewals echo.
	vouchedUntil time.Time
	// clashUntil: until then another instance of the node ID is knocking
	// (refused as a duplicate) while this one holds the session. The
	// member counts as unsynced meanwhile, and the node ID's own deletes
	// are refused without dropping its references: whatever the other
	// instance uses under the same ID is in neither's reach otherwise.
	clashUntil time.Time
	// sync is the sync in progress, if any (syncbounds.go starts and ends
	// it).
	sync *nodeSync
	// writing is the node's sync being written, if any (syncwrite.go):
	// no other sync of the node starts meanwhile. Usually sync too; not
	// once the session lapsed or ended during the write.
	writing *nodeSync
	// seen is the node's last session call; rec.LastSeen is what is
	// persisted, written with the member and at a clean shutdown only
	// (persistSeen).
	seen time.Time
	// done is the last sync that made the node synced, and its count: a
	// retry of its last request (whose answer was lost) is answered
	// again rather than refused as unknown, while the node stays synced.
	done      string
	doneCount int
	// newMember: the member was made by a session of this coordinator
	// and has not synced since. Every session answer says so
	// (api.SessionResponse.NewMember) until its sync: a node that was
	// forgotten learns it from any of them, not from the first alone,
	// whose answer may be lost.
	newMember bool
	// refsWriting counts the references of the node admitted by the
	// reference rule and not yet durable (refrule.go): the member is
	// not forgotten meanwhile. Incremented under mmu, decremented without.
	refsWriting atomic.Int64
}

// markSynced makes m synced by its sync id, of count references.
// Callers hold mmu.
func (m *member) markSynced(id string, count int) {
	m.synced, m.done, m.doneCount = true, id, count
	m.newMember = false
	m.vouchedUntil = time.Time{}
	if m.instance == "" {
		m.vouchedUntil = m.sessionUntil // olderrenewal.go
	}
}

// syncedAt reports whether m counts as synced at now (the delete rule,
// GET /nodes). Callers hold mmu.
func (m *member) syncedAt(now time.Time) bool {
	return m.synced && m.live(now) && !m.clashing(now) && m.vouched(now)
}

func (m *member) live(now time.Time) bool {
	return !m.sessionUntil.IsZero() && now.Before(m.sessionUntil)
}

// loadMembers reads the persisted members: none is live or synced.
func (mp *memberPart) loadMembers(ctx context.Context) error {
	recs, err := mp.state.ListMembers(ctx)
	if err != nil {
		return fmt.Errorf("lockserver: loading members: %w", err)
	}
	for _, r := range recs {
		mp.members[r.ID] = &member{rec: r}
	}
	mp.metrics.members.Set(float64(len(mp.members)))
	return nil
}

// Session handles POST /nodes/session: it opens or renews the node's
// session, making it a member. A renewal (a valid echo: timing.go) that
// arrives late is api.ErrLate and extends nothing; a session that had
// lapsed, or one opened without an echo, starts unsynced. A session of
// another instance while one's is live, or of another lineage than the
// node ID's, is api.ErrDuplicateNode (lineage.go).
func (mp *memberPart) Session(ctx context.Context, req api.SessionRequest) (api.SessionResponse, error) {
	if err := validateID("node_id", req.NodeID); err != nil {
		return api.SessionResponse{}, err
	}
	c := mp.Cluster()
	if req.ClusterID != "" && req.ClusterID != c.ClusterID {
		return api.SessionResponse{}, wrongCluster(req.ClusterID, c)
	}
	now := mp.now()
	mp.mmu.Lock()
	defer mp.mmu.Unlock()
	if err := mp.checkRoot(req, c); err != nil {
		if errors.Is(err, api.ErrRootClaimed) {
			mp.metrics.rootClaimed.Inc()
		}
		return api.SessionResponse{}, err
	}
	m := mp.members[req.NodeID]
	isNew := m == nil
	if isNew {
		m = &member{rec: refcount.Member{ID: req.NodeID, FirstSeen: now, Bystander: bystanderSession(req)}, newMember: true}
	}
	if err := mp.checkInstance(ctx, req, m, now); err != nil {
		return api.SessionResponse{}, err
	}
	renewal := mp.timing.echoValid(req.Echo, now)
	if renewal {
		if err := mp.timing.checkLate(req.NodeID, "session renewal", req.Echo, now); err != nil {
			return api.SessionResponse{}, err
		}
	}
	askSync := false
	switch {
	case !m.live(now):
		// A lapsed session: the node syncs in this one.
		m.synced = false
		mp.syncs.endSync(m)
	case renewal:
		m.vouchedUntil = time.Time{} // its echo proves its timing (olderrenewal.go)
	case olderRenewal(req, m, now):
		// An older node's renewal, within what its last sync vouches for
		// (olderrenewal.go): still synced, asked to sync again once half
		// of that has passed.
		askSync = mp.olderResyncDue(m, now)
	default:
		// An open: the node syncs in this one.
		m.synced = false
	}
	if err := mp.noLongerBystander(ctx, m, !bystanderSession(req)); err != nil {
		return api.SessionResponse{}, err
	}
	if err := mp.recordLineage(ctx, m, req.Generation, isNew); err != nil {
		return api.SessionResponse{}, err
	}
	if err := mp.recordRoot(ctx, req); err != nil {
		return api.SessionResponse{}, err
	}
	if err := mp.persistSeen(ctx, m, now); err != nil {
		return api.SessionResponse{}, err
	}
	if isNew {
		mp.members[req.NodeID] = m
		mp.metrics.members.Set(float64(len(mp.members)))
		log.G(ctx).WithField("node", req.NodeID).Info("new member")
	}
	m.instance = req.InstanceID
	mp.noteShape(m, req.InstanceID == "")
	m.sessionUntil = now.Add(mp.cfg.SessionTTL)
	m.answered = now
	return api.SessionResponse{Cluster: c, SessionTTLMs: mp.cfg.SessionTTL.Milliseconds(), Synced: m.synced && !askSync,
		StampMs: mp.timing.uptime(now), NewMember: m.newMember}, nil
}

// clashing reports whether another instance of m's node ID was refused
// within the last session TTL.
func (m *member) clashing(now time.Time) bool { return now.Before(m.clashUntil) }

// checkClash refuses a delete by a node ID that two live instances use,
// before the delete drops the ID's reference: the reference may be the
// other instance's. The refusal is api.ErrDuplicateNode, which the node
// takes as "nothing changed" (it keeps its journal entry).
func (mp *memberPart) checkClash(resourceID, node string, now time.Time) error {
	mp.mmu.Lock()
	defer mp.mmu.Unlock()
	if m := mp.members[node]; m != nil && m.clashing(now) {
		return fmt.Errorf("delete:%s by node %q refused: another instance with this node ID was refused %s ago, and its references cannot be told from this one's; give each host a unique --node-id: %w",
			resourceID, node, (mp.cfg.SessionTTL - m.clashUntil.Sub(now)).Round(time.Millisecond), api.ErrDuplicateNode)
	}
	return nil
}

// persistSeen records that m held a session at now. Only a new member's
// record is written (membership is durable: docs/design.md §8.4); a known
// member's LastSeen is informational (GET /nodes; nothing decides on it:
// expiry counts absence in this coordinator's uptime), so it stays in
// memory and is written at a clean shutdown (flushSeen), not with an
// fsync per node per minute (docs/design.md §10.2). Callers hold mmu.
func (mp *memberPart) persistSeen(ctx context.Context, m *member, now time.Time) error {
	m.seen = now
	if !m.rec.LastSeen.IsZero() {
		return nil
	}
	rec := m.rec
	rec.LastSeen = now
	if err := mp.commit(ctx, new(refcount.Batch).PutMember(rec)); err != nil {
		return fmt.Errorf("session of node %s: %w", rec.ID, err)
	}
	m.rec = rec
	return nil
}

// flushSeen writes the LastSeen of every member seen since its record
// was written, in one commit (Close).
func (mp *memberPart) flushSeen(ctx context.Context) error {
	mp.mmu.Lock()
	defer mp.mmu.Unlock()
	b := new(refcount.Batch)
	var recs []*member
	for _, m := range mp.members {
		if m.seen.After(m.rec.LastSeen) {
			rec := m.rec
			rec.LastSeen = m.seen
			b.PutMember(rec).Break()
			recs = append(recs, m)
		}
	}
	if err := mp.commit(ctx, b); err != nil {
		return fmt.Errorf("persist the members' last session: %w", err)
	}
	for _, m := range recs {
		m.rec.LastSeen = m.seen
	}
	return nil
}

// noteRef tells a sync in progress of node that node itself added (or
// dropped) a reference, so that the sync's replacement keeps the change.
// Callers hold the resource's shard mutex and call it before they write
// the change.
func (mp *memberPart) noteRef(node, resourceID string, added bool) {
	mp.mmu.Lock()
	defer mp.mmu.Unlock()
	if m := mp.members[node]; m != nil {
		mp.syncs.noteChange(m, resourceID, added)
	}
}

// unsyncedLocked returns the members that are not synced now, sorted.
// Callers hold mmu.
func (mp *memberPart) unsyncedLocked(now time.Time) []string {
	var out []string
	for id, m := range mp.members {
		if !m.syncedAt(now) && !mp.letGo(m, now) {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return out
}

// syncedError refuses a delete of resourceID while members are unsynced.
func (mp *memberPart) syncedError(resourceID string, unsynced []string) error {
	if len(unsynced) > 0 {
		mp.metrics.unsyncedRefusals.Inc()
		return &api.UnsyncedError{ResourceID: resourceID, Nodes: unsynced}
	}
	return nil
}

// allSynced is the members' half of the delete rule (docs/design.md
// §8.7, membersView): noRefs, the references' half, and every member
// synced, read in one step under mmu. noRefs counts, through withSyncing,
// the references a sync being written adds (writingRefs): the write does
// not hold mmu (syncwrite.go), but its node becomes synced only under mmu
// once the write is durable, so a delete that read no reference, then
// found the syncing member synced, cannot be granted while that member's
// sync references the resource (TestDeleteRuleAtomicWithSync,
// docs/design.md §10.5). Callers may hold the resource's shard mutex
// (lock order: shard, mmu, reference stripes).
func (mp *memberPart) allSynced(resourceID string, now time.Time, noRefs func(withSyncing func(refcount.Set) refcount.Set) error) error {
	mp.mmu.Lock()
	defer mp.mmu.Unlock()
	if noRefs != nil {
		withSyncing := func(rc refcount.Set) refcount.Set { return mp.syncs.writingRefs(resourceID, rc) }
		if err := noRefs(withSyncing); err != nil {
			return err
		}
	}
	return mp.syncedError(resourceID, mp.unsyncedLocked(now))
}

// Forget handles DELETE /nodes/{id} (admin): the node stops being a
// member and its references are dropped. A node with a live session is
// refused: it would be a member again at its next keepalive, without its
// references. A node that is no member (never joined, or forgotten
// already) and holds no reference is api.ErrNotFound, and nothing is
// written; a non-member the reference hashes still count references of
// (or whose hashes are not known) has them dropped, as a forget does.
func (mp *memberPart) Forget(ctx context.Context, nodeID string) error {
	if err := validateID("node_id", nodeID); err != nil {
		return err
	}
	mp.mmu.Lock()
	defer mp.mmu.Unlock()
	m := mp.members[nodeID]
	if m != nil && m.live(mp.now()) {
		return fmt.Errorf("node %s has a live session; stop it before forgetting it: %w", nodeID, api.ErrMemberLive)
	}
	if m == nil {
		if held, known := mp.refs.NodeHash(nodeID); known && held.Empty() {
			return fmt.Errorf("forget node %s: no such member (never joined, or forgotten already) and no reference of it; nothing changed: %w",
				nodeID, api.ErrNotFound)
		}
	}
	return mp.forgetLocked(ctx, nodeID, "forgotten by an operator")
}

// forgetLocked drops the member and its references (docs/design.md
// §8.4, §8.10). On a store that commits the batch as several transactions
// (etcd, docs/design.md §7.1) the references go first, in groups that fit
// (refcount.Manager.ReplaceNodeGroups), and the member record last, in a
// group of its own. Interrupted between two, it leaves the member with
// part of its references: the member is not live (Forget and Expire
// refuse a live one), so it is not synced and deletes still wait for it,
// and the references dropped were being dropped on purpose; running it
// again completes it, and a node that was not gone after all is
// unsynced until its next sync stores them again. The other order would
// leave references of a node that is no member any more, which nothing
// drops (Expire needs a member) and which block deletes for ever.
// Callers hold mmu.
func (mp *memberPart) forgetLocked(ctx context.Context, nodeID, why string) error {
	if m := mp.members[nodeID]; m != nil && m.refsWriting.Load() > 0 {
		// Admitted while its session was live; dropped now, they would
		// land after the drop, references of a non-member (refrule.go).
		return fmt.Errorf("forget node %s: references of it admitted while its session was live are still being written; nothing changed, run the same command again: %w",
			nodeID, api.ErrUnavailable)
	}
	failpoint.Inject(failpoint.CoordForgetBeforeCommit)
	b, err := mp.refs.ReplaceNodeGroups(ctx, new(refcount.Batch), nodeID, nil, nil)
	if err == nil {
		err = mp.commit(ctx, b.Break().DeleteMember(nodeID))
	}
	if err != nil {
		return fmt.Errorf("forget node %s: the member is kept (part of its references may have been dropped); run the same command again: %w", nodeID, err)
	}
	failpoint.Inject(failpoint.CoordForgetAfterCommit)
	delete(mp.markers, nodeID)
	if m := mp.members[nodeID]; m != nil {
		mp.syncs.endSync(m)
		mp.noteShape(m, false)
	}
	delete(mp.members, nodeID)
	mp.metrics.members.Set(float64(len(mp.members)))
	log.G(ctx).WithField("node", nodeID).WithField("reason", why).Warn("member forgotten; its references are dropped")
	return nil
}

// NodesPage handles GET /nodes: the members whose node ID sorts after
// after, in ID order, at most limit of them (0: all), and the `after` of
// the next page if there is one. It costs O(members) in memory, no
// storage read.
func (mp *memberPart) NodesPage(_ context.Context, after string, limit int) (api.NodesResponse, error) {
	if limit < 0 {
		return api.NodesResponse{}, fmt.Errorf("nodes: limit %d: %w", limit, api.ErrInvalidArgument)
	}
	now := mp.now()
	mp.mmu.Lock()
	defer mp.mmu.Unlock()
	ids := make([]string, 0, len(mp.members))
	for id := range mp.members {
		if id > after {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	out := api.NodesResponse{Cluster: mp.Cluster(), NodeExpiryMs: mp.cfg.NodeExpiry.Milliseconds(),
		BystanderAfterMs: mp.cfg.BystanderAfter.Milliseconds()}
	if limit > 0 && len(ids) > limit {
		ids = ids[:limit]
		out.Next = ids[limit-1]
	}
	out.Nodes = make([]api.NodeStatus, 0, len(ids))
	for _, id := range ids {
		m := mp.members[id]
		seen := m.rec.LastSeen
		if m.seen.After(seen) {
			seen = m.seen
		}
		if m.live(now) {
			seen = now
		}
		out.Nodes = append(out.Nodes, api.NodeStatus{
			NodeID: m.rec.ID, Live: m.live(now), Synced: m.syncedAt(now),
			FirstSeen: m.rec.FirstSeen.UTC().Format(time.RFC3339Nano), LastSeen: seen.UTC().Format(time.RFC3339Nano),
			AbsentMs: mp.absence(m, now).Milliseconds(), Bystander: m.rec.Bystander,
		})
	}
	return out, nil
}

// absence is how long the coordinator has not heard from m, in its own
// uptime: since the end of m's last session or since this coordinator
// started, whichever is later, measured on the monotonic clock. Time the
// coordinator was down never counts (a weekend's outage expires nobody).
// Zero while m is live. Callers hold mmu.
func (mp *memberPart) absence(m *member, now time.Time) time.Duration {
	if m.live(now) {
		return 0
	}
	from := mp.timing.started
	if m.sessionUntil.After(from) {
		from = m.sessionUntil
	}
	return max(0, now.Sub(from))
}
