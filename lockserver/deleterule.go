package lockserver

import (
	"context"
	"fmt"
	"time"

	"github.com/sharedcontent/sharedcontent/internal/failpoint"
	"github.com/sharedcontent/sharedcontent/lockserver/api"
	"github.com/sharedcontent/sharedcontent/refcount"
)

// The delete rule (docs/design.md §8.7), the one rule that crosses the
// coordinator's parts: a delete is granted only while no node references
// the resource (this part's half, with the references still being
// written, and those a sync being written adds) and every member is
// synced (the members' half, asked through membersView.allSynced, which
// holds the members still while this part reads the references). A sync's
// write does not hold the members' mutex (syncwrite.go) but makes its node
// synced only under it once durable, and that node's additions during the
// write count here (withSyncing): so a delete that read no reference, then
// found the syncing member synced, cannot be granted while that member's
// sync references the resource (docs/design.md §10.5). The locks part asks it when a delete or an
// update asks, reaches the head of its queue, and unlocks.

// checkDeleteRule is the whole delete rule: no reference to the resource
// (but own's, a dangling reap's own, which it drops) and every member
// synced, read in one step (membersView.allSynced). Callers hold the
// resource's shard mutex (lock order: shard, members, reference
// stripes, refcount stripes).
func (rs *references) checkDeleteRule(ctx context.Context, resourceID string, reap api.ReapMode, own string, now time.Time) error {
	return rs.members.allSynced(resourceID, now, func(withSyncing func(refcount.Set) refcount.Set) error {
		rc, err := rs.refsWithPending(ctx, resourceID)
		if err != nil {
			return fmt.Errorf("delete:%s: %w", resourceID, err)
		}
		rc = withSyncing(rc)
		if own != "" && rc.Has(own) {
			rc = rc.Clone()
			rc.Remove(own)
		}
		if rc.Len() > 0 {
			if reap == api.ReapDangling {
				return fmt.Errorf("delete:%s: a dangling reap drops only the reaper's own reference; another node's goes only with that node (its own delete, expiry, node forget): %w",
					resourceID, inUse(resourceID, rc))
			}
			return inUse(resourceID, rc)
		}
		return nil
	})
}

// checkDeleteUnlock checks a delete's unlock(success), which follows the
// holder's rename of the file: its lease has not expired, and the delete
// rule (checkDeleteRule) still holds. A holder frozen after its last check
// (a paused VM) may rename the file long after it; by then a member may
// have been cut off and failed open (docs/design.md §8.8), using the blob
// unregistered: that member is unsynced, or synced with its reference,
// so the unlock is refused and the holder puts the blob back
// (docs/design.md §8.11). A refusal says why, as a release reason.
// Callers hold the resource's shard mutex.
func (rs *references) checkDeleteUnlock(ctx context.Context, id string, g *grant, now time.Time) (reason string, err error) {
	if !now.Before(g.expires) {
		return "expired", fmt.Errorf("delete:%s: lease %s expired %s ago: %w", id, g.leaseID, now.Sub(g.expires).Round(time.Millisecond), api.ErrNotHolder)
	}
	own := "" // a dangling reap's own reference, which it drops
	if g.reap == api.ReapDangling {
		own = g.nodeID
	}
	return "refused", rs.checkDeleteRule(ctx, id, g.reap, own, now)
}

// checkDelete applies the delete rule (docs/design.md §8.7) to a new delete request:
// the reaper's conditions if the reaper asks (reap.go), else the
// requester's own reference goes; then no node may reference the
// resource (but a dangling reap's own reference, which it drops) and
// every member must be synced.
func (rs *references) checkDelete(ctx context.Context, req api.LockRequest, now time.Time) error {
	own, err := rs.reapRule(req.ResourceID, req.NodeID, req.Reap, now)
	if err != nil {
		return err
	}
	if err := rs.members.checkClash(req.ResourceID, req.NodeID, now); err != nil {
		return err
	}
	if req.Reap == "" {
		// The requesting node's GC no longer uses the resource.
		rs.members.noteRef(req.NodeID, req.ResourceID, false)
		failpoint.Inject(failpoint.CoordDeleteBeforeRefs)
		_, err := rs.store.refs.RemoveRef(ctx, req.ResourceID, req.NodeID)
		if err := rs.store.wrote(ctx, err); err != nil {
			return fmt.Errorf("%s:%s: %w", req.Type, req.ResourceID, err)
		}
		failpoint.Inject(failpoint.CoordDeleteAfterRefs)
		rs.noteActivity(req.ResourceID, now)
	}
	return rs.checkDeleteRule(ctx, req.ResourceID, req.Reap, own, now)
}

// checkGrantRefs re-checks, when a queued delete or update reaches the
// head, the rules that were checked when it queued (a queued delete's
// own reference went then).
func (rs *references) checkGrantRefs(ctx context.Context, id string, req request) error {
	switch {
	case req.typ == idxDelete:
		now := rs.now()
		own, err := rs.reapRule(id, req.nodeID, req.reap, now)
		if err != nil {
			return err
		}
		return rs.checkDeleteRule(ctx, id, req.reap, own, now)
	case req.typ == idxUpdate && rs.cfg.UpdateRequiresNoRef:
		return rs.checkNoOtherRefs(ctx, id, req.nodeID)
	}
	return nil
}

func (rs *references) checkNoOtherRefs(ctx context.Context, id, node string) error {
	rc, err := rs.refsWithPending(ctx, id)
	if err != nil {
		return fmt.Errorf("update:%s: %w", id, err)
	}
	if rc.Has(node) {
		rc = rc.Clone()
		rc.Remove(node)
	}
	if rc.Len() > 0 {
		return inUse(id, rc)
	}
	return nil
}

func inUse(id string, rc refcount.Set) error {
	return &api.InUseError{Refs: api.RefsResponse{ResourceID: id, Count: rc.Len(), Nodes: rc.NodeList()}}
}
