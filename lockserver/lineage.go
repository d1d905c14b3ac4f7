package lockserver

import (
	"context"
	"fmt"
	"time"

	"github.com/containerd/log"

	"github.com/sharedcontent/sharedcontent/lockserver/api"
	"github.com/sharedcontent/sharedcontent/refcount"
)

// One host per node ID (docs/design.md §8.5). Two facts tell the
// instances of a node ID apart:
//   - the instance ID, random per daemon start: while one instance's
//     session is live, another instance's is refused (two daemons at once,
//     whatever their state dirs);
//   - the lineage, the node's journal generation, which lives in its state
//     dir and so survives a restart of the same host (clean or not) but not
//     a wiped state dir, and differs on another host (a clone of the image,
//     a host that took the name): the coordinator records it with the
//     member, and refuses a session from another lineage, live or not,
//     until an operator releases the ID (Release). Otherwise a clone that
//     starts while the original is cut off, or after the clash, would take
//     in the ID's references (contentv2/seed.go) and its GC drop those of
//     blobs only the original's containerd lists.
//
// Each refusal marks the ID clashing for a session TTL (member.clashUntil):
// the member counts as unsynced, and the ID's own deletes are refused.
//
// A node that has sent an instance ID or a lineage once must send them in
// every session: a session without them would otherwise clear them, and
// let anyone who may speak for the node (the shared token, no auth) lock
// the node out, or let a clone in.

// checkInstance refuses a session of another instance while m's session
// is live, and one of another lineage than m's, and a session that leaves
// out what the node ID has sent before. Callers hold mmu.
func (mp *memberPart) checkInstance(ctx context.Context, req api.SessionRequest, m *member, now time.Time) error {
	switch {
	case m.rec.Lineage != "" && (req.InstanceID == "" || req.Generation == ""):
		return fmt.Errorf("session of node %s without an instance_id and a generation: this node ID has sent them before (a node never stops sending them; an older daemon cannot take over a node ID a newer one used): %w",
			req.NodeID, api.ErrInvalidArgument)
	case m.instance != "" && req.InstanceID == "":
		return fmt.Errorf("session of node %s without an instance_id: this node ID has sent one before: %w", req.NodeID, api.ErrInvalidArgument)
	}
	lg := log.G(ctx).WithField("node", req.NodeID).WithField("instance", req.InstanceID)
	switch {
	case m.live(now) && m.instance != "" && m.instance != req.InstanceID:
		mp.clash(m, now)
		lg.WithField("live_instance", m.instance).Error("two instances use one node ID; the second is refused")
		return fmt.Errorf("node id %q is in use by another live instance (another host or daemon with the same node ID, e.g. a cloned VM or a shared hostname): give each host a unique --node-id: %w",
			req.NodeID, api.ErrDuplicateNode)
	case m.rec.Lineage != "" && m.rec.Lineage != req.Generation:
		mp.clash(m, now)
		lg.WithField("generation", req.Generation).WithField("lineage", m.rec.Lineage).
			Error("a node ID's session from another host (another journal generation) is refused until an operator releases the ID")
		return fmt.Errorf("node id %q belongs to the host whose journal generation is %s; this daemon's is %s (another host with the same node ID, e.g. a cloned VM, or this host with a wiped or new state dir): give each host a unique --node-id; if the host that held the ID is gone for good, or this is that host with a new state dir, release the ID with `sharedcontentctl node release %s` (this host then takes over the ID's references): %w",
			req.NodeID, m.rec.Lineage, req.Generation, req.NodeID, api.ErrDuplicateNode)
	}
	return nil
}

// clash marks m's node ID clashing for a session TTL. Callers hold mmu.
func (mp *memberPart) clash(m *member, now time.Time) {
	mp.metrics.duplicateNodes.Inc()
	m.clashUntil = now.Add(mp.cfg.SessionTTL)
}

// recordLineage records generation as m's lineage when m has none (a new
// member's record is written by persistSeen). Callers hold mmu, after
// checkInstance.
func (mp *memberPart) recordLineage(ctx context.Context, m *member, generation string, isNew bool) error {
	if generation == "" || m.rec.Lineage == generation {
		return nil
	}
	rec := m.rec
	rec.Lineage = generation
	if !isNew {
		if err := mp.commit(ctx, new(refcount.Batch).PutMember(rec)); err != nil {
			return fmt.Errorf("session of node %s: record its lineage: %w", rec.ID, err)
		}
	}
	m.rec = rec
	return nil
}

// Release handles POST /nodes/{id}/release (admin): the node ID stops
// belonging to its lineage, so that the next host to open a session with
// it (a rebuilt host, a host with a new state dir, the one host left of a
// clash) takes it over, references included. A member with a live session
// is refused, as in Forget: stop it first. The member stays, with its
// references; the next host's first sync only adds to them (a new journal
// generation, docs/design.md §8.6).
func (mp *memberPart) Release(ctx context.Context, nodeID string) (api.ReleaseResponse, error) {
	if err := validateID("node_id", nodeID); err != nil {
		return api.ReleaseResponse{}, err
	}
	mp.mmu.Lock()
	defer mp.mmu.Unlock()
	m := mp.members[nodeID]
	switch {
	case m == nil:
		return api.ReleaseResponse{}, fmt.Errorf("node %s is not a member: nothing to release: %w", nodeID, api.ErrNotFound)
	case m.live(mp.now()):
		return api.ReleaseResponse{}, fmt.Errorf("node %s has a live session; stop the daemon that holds it before releasing its ID: %w", nodeID, api.ErrMemberLive)
	}
	rec := m.rec
	rec.Lineage = ""
	if rec != m.rec {
		if err := mp.commit(ctx, new(refcount.Batch).PutMember(rec)); err != nil {
			return api.ReleaseResponse{}, fmt.Errorf("release node %s: nothing changed; run the same command again: %w", nodeID, err)
		}
	}
	old := m.rec.Lineage
	m.rec, m.instance = rec, ""
	log.G(ctx).WithField("node", nodeID).WithField("lineage", old).Warn("node ID released by an operator: the next host to open its session takes it over")
	return api.ReleaseResponse{NodeID: nodeID, Lineage: old}, nil
}
