package lockserver

import (
	"context"
	"time"

	"github.com/containerd/log"

	"github.com/sharedcontent/sharedcontent/refcount"
)

// Deletes are remembered (docs/design.md §8.9), by the locks part, which
// keeps their completions. A granted delete writes a marker {node, fence, expiry}
// before its grant is answered; its unlock(success) drops the resource's
// references and the marker and records the completion in one
// transaction. A delete whose lease lapses (it expired, or was never
// claimed) counts as completed too, since the coordinator cannot know
// whether the holder renamed the file away; so does a marker found at
// start (the coordinator stopped while the delete was granted).
//
// Completions are kept CompletedTTL: the stale-view rule (AddFoundRef)
// refuses a node that still sees the blob. A coordinator that restarts
// keeps every persisted completion for CompletedTTL from its own start,
// whatever its time says: a coordinator that was down for a weekend does
// not forget a delete because the wall clock moved. A successful pull, or
// a committing reference, ends a completion in the same transaction as
// its reference write.

// loadDeletes turns the markers of deletes that were granted when the
// coordinator stopped into lapsed completions, and retains every persisted
// completion for CompletedTTL from now.
func (lk *locks) loadDeletes(ctx context.Context) error {
	d, err := lk.store.state.Deletes(ctx)
	if err != nil {
		return err
	}
	now := lk.now()
	b := new(refcount.Batch)
	for id, m := range d.InFlight {
		c := refcount.DeleteCompletion{Node: m.Node, At: now, Lapsed: true, Fence: m.Fence}
		b.DropDeleting(id).PutDeleted(id, c).Break()
		d.Completed[id] = c
	}
	if err := lk.store.refs.Commit(ctx, b); err != nil {
		return err
	}
	for id, c := range d.Completed {
		sh := lk.shardFor(id)
		r := sh.resource(id)
		r.keys[idxDelete].completed = &completion{nodeID: c.Node, at: now, lapsed: c.Lapsed, fence: c.Fence}
	}
	if n := len(d.InFlight); n > 0 {
		log.G(ctx).WithField("deletes", n).Warn("deletes were granted when the coordinator stopped; counted as completed")
	}
	return nil
}

// markDelete persists the marker of a delete being granted to g.
func markDelete(ctx context.Context, st *store, id string, g *grant) error {
	return st.commit(ctx, new(refcount.Batch).PutDeleting(id, refcount.DeleteMarker{Node: g.nodeID, Fence: g.fence, Expires: g.expires}))
}

// endDelete drops the marker of the delete g of r that ended without
// success. One that lapsed (reason expired or unclaimed) is recorded as
// completed, in memory and on disk. A failed write is logged: the marker
// stays, and a restart counts it as completed, which is the safe side.
// Callers hold the shard's mutex.
func (lk *locks) endDelete(ctx context.Context, r *resource, g *grant, reason string, now time.Time) {
	b := new(refcount.Batch).DropDeleting(r.id)
	if reason == "expired" || reason == "unclaimed" {
		r.keys[idxDelete].completed = &completion{nodeID: g.nodeID, at: now, lapsed: true, fence: g.fence}
		// The blob may be gone: a later pull must not skip.
		r.keys[idxPull].completed = nil
		b.PutDeleted(r.id, refcount.DeleteCompletion{Node: g.nodeID, At: now, Lapsed: true, Fence: g.fence})
	}
	if err := lk.store.commit(ctx, b); err != nil {
		log.G(ctx).WithError(err).WithField("resource", r.id).Warn("recording the end of a delete; a restart counts it as completed")
	}
}

// pruneDeleted drops the persisted completions of ids, whose retention
// ended. A failed write is logged: a restart retains them again.
func pruneDeleted(ctx context.Context, st *store, ids []string) {
	if len(ids) == 0 {
		return
	}
	b := new(refcount.Batch)
	for _, id := range ids {
		b.DropDeleted(id).Break()
	}
	if err := st.commit(ctx, b); err != nil {
		log.G(ctx).WithError(err).WithField("completions", len(ids)).Warn("pruning delete completions; a restart retains them again")
	}
}
