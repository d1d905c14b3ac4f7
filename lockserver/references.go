package lockserver

import (
	"context"
	"sync"
	"time"

	"github.com/containerd/log"

	"github.com/sharedcontent/sharedcontent/internal/failpoint"
	"github.com/sharedcontent/sharedcontent/lockserver/api"
	"github.com/sharedcontent/sharedcontent/refcount"
)

// references is the coordinator's references part (docs/design.md §3.7,
// §8.7-§8.12, §8.21): the reference sets (refs.go), the references still being
// written, the delete rule (deleterule.go), the reap rules and the
// resources' recent activity (reap.go), the pins (pins.go), and the reference writes of a
// successful unlock and of an expired pull lease (here). A reference add's walk stays inside it; it asks the members
// part (membersView) for the reference rule and the members' half of the
// delete rule, and the locks part (resourceLocks) to hold a resource
// still while it decides.
type references struct {
	cfg     Config
	now     func() time.Time
	started time.Time // the coordinator's start: activity is kept as uptime
	metrics *metrics
	store   *store
	members membersView
	locks   resourceLocks
	// stripes hold per-resource state, striped like the locks part's
	// shards (shardIndex).
	stripes []*refStripe
	// pins are the operator-named holders of references (pins.go).
	pins *pinSet
}

// refStripe is the references part's state of the resources of one
// shard index. Its mutex is taken after the resource's shard mutex, or
// alone: an add that has become durable leaves adding without the shard
// mutex, so the adds one commit ends do not queue for it in front of the
// shard's locks and unlocks.
type refStripe struct {
	mu sync.Mutex
	// adding maps a resource to the nodes whose references to it are
	// ordered but not yet durable, with how many each (refs.go addRef).
	adding map[string]map[string]int
	// recent maps a resource to the uptime of its last pull or reference
	// change, for the reap grace; every resource counts as active at
	// recentFloor (the map overflowed), and prunedAt is the uptime of the
	// last prune (reap.go).
	recent      map[string]time.Duration
	recentFloor time.Duration
	prunedAt    time.Duration
}

// newReferences returns the references part; locks is set once the locks
// part exists (Coordinator).
func newReferences(cfg Config, st *store, members membersView, now func() time.Time, started time.Time) *references {
	rs := &references{cfg: cfg, now: now, started: started, metrics: st.metrics, store: st, members: members,
		stripes: make([]*refStripe, cfg.Shards)}
	for i := range rs.stripes {
		rs.stripes[i] = &refStripe{}
	}
	return rs
}

// stripe is the stripe of a resource.
func (rs *references) stripe(resourceID string) *refStripe {
	return rs.stripes[shardIndex(resourceID, len(rs.stripes))]
}

// recordSuccess writes what the successful unlock of g, a lease of
// resourceID, changes in the reference sets: a pull's reference, by the
// reference rule (refrule.go), with the lease's record and a delete's
// completion it ends (endsDelete); a delete's drop of the references,
// with its marker and its completion (deleted). If it fails, nothing
// changed and the holder retries the unlock. On success the reference
// counts as being written until done is called. Callers hold the
// resource's shard mutex.
//
// A pull's write also carries the references of the waiters askers
// (nodes whose queued requests asked for them, api.LockRequest.AddRef;
// docs/design.md §10.6, lever c) that the reference rule admits, each in
// an atomic group of its own after the holder's: one commit for a whole
// queue instead of a POST /refs/add per waiter. It returns them (added);
// a waiter refused (no live session) is told skip without RefAdded and
// adds its reference itself, which the rule then refuses as it would
// have. A write that fails after the holder's group leaves some of them
// recorded: the unlock fails, its retry writes them again (adding a
// reference is idempotent), and meanwhile no waiter was told.
func (rs *references) recordSuccess(ctx context.Context, resourceID string, g *grant, endsDelete bool, askers []requestKey, now time.Time) (added map[requestKey]struct{}, done func(), err error) {
	done = func() {}
	switch g.typ {
	case idxPull:
		// The reference rule: refused, the unlock changes nothing.
		written, err := rs.members.admitRef(g.nodeID, resourceID, now)
		if err != nil {
			return nil, done, err
		}
		failpoint.Inject(failpoint.CoordUnlockPullBefore)
		b := new(refcount.Batch).AddRef(resourceID, g.nodeID)
		if g.recorded {
			// The lease's record goes with the reference it ends in.
			b.DropLease(resourceID, g.leaseID)
		}
		if endsDelete {
			// The pull ends the delete's completion, on disk too.
			b.DropDeleted(resourceID)
		}
		added, dones := rs.admitAskers(resourceID, askers, b, now)
		written = joinDone(append(dones, written))
		if err := rs.store.commit(ctx, b); err != nil {
			written()
			return nil, done, err
		}
		failpoint.Inject(failpoint.CoordUnlockPullAfter)
		return added, written, nil
	case idxDelete:
		failpoint.Inject(failpoint.CoordUnlockDeleteBefore)
		if err := rs.store.commit(ctx, deleted(resourceID, g.nodeID, g.reap, g.fence, now)); err != nil {
			return nil, done, err
		}
		failpoint.Inject(failpoint.CoordUnlockDeleteAfter)
	}
	return nil, done, nil
}

// admitAskers applies the reference rule to the node of each request of
// askers and adds the reference of each node it admits to b, once, in an
// atomic group of its own. It returns the requests admitted and the done
// functions of their references.
func (rs *references) admitAskers(resourceID string, askers []requestKey, b *refcount.Batch, now time.Time) (added map[requestKey]struct{}, dones []func()) {
	admitted := map[string]bool{}
	for _, q := range askers {
		ok, seen := admitted[q.node]
		if !seen {
			written, err := rs.members.admitRef(q.node, resourceID, now)
			if ok = err == nil; ok {
				dones = append(dones, written)
				b.Break().AddRef(resourceID, q.node)
			}
			admitted[q.node] = ok
		}
		if !ok {
			continue // told skip without RefAdded: it adds its own, as before
		}
		if added == nil {
			added = map[requestKey]struct{}{}
		}
		added[q] = struct{}{}
	}
	return added, dones
}

// joinDone returns a function that calls each of dones.
func joinDone(dones []func()) func() {
	if len(dones) == 1 {
		return dones[0]
	}
	return func() {
		for _, d := range dones {
			d()
		}
	}
}

// deleted returns the batch of a delete's unlock(success) by the lease of
// node with fence: the resource's references (a dangling reap's: node's
// own only, docs/design.md §8.12) and marker go, its completion (with the
// fence, so that it is known after a restart) is recorded.
func deleted(id, node string, reap api.ReapMode, fence uint64, now time.Time) *refcount.Batch {
	b := new(refcount.Batch)
	if reap == api.ReapDangling {
		b.RemoveRef(id, node)
	} else {
		b.DropRefs(id)
	}
	return b.DropDeleting(id).PutDeleted(id, refcount.DeleteCompletion{Node: node, At: now, Fence: fence})
}

// keepHolderRef adds the holder's reference when g, a pull lease of id,
// expires, in the batch that drops its record (docs/design.md §8.17): a
// node whose reference add met a failover commits the blob under its
// lease and leaves the reference to its unlock, and a lease that expires
// instead (the unlock never arrived) must not leave that blob
// unreferenced. If the holder did not commit, its next sync or delete of
// the blob drops the reference, and the reaper drops one to a blob that
// does not exist. It reports whether the reference is written; if not, the
// lease stays held (nothing else may take the blob meanwhile) and the next
// sweep tries again. Callers hold the shard's mutex.
//
// A holder without a live session gets no reference, by the reference
// rule (refrule.go): a member whose session lapsed syncs its journal,
// which has the blob, when it opens the next (deletes wait for it
// meanwhile); one that is no member would keep a reference nothing ever
// drops. The rule is applied with the members held still through the
// write (membersView.whileAdmitted), so a Forget cannot land between the
// two (lock order: shard, members, refcount stripes).
func (rs *references) keepHolderRef(ctx context.Context, id string, g *grant, now time.Time) bool {
	key := string(typeNames[g.typ]) + ":" + id
	err := rs.members.whileAdmitted(g.nodeID, id, now, func(refused error) error {
		b := new(refcount.Batch)
		if refused == nil {
			b.AddRef(id, g.nodeID)
		} else {
			log.G(ctx).WithError(refused).WithField("key", key).WithField("node", g.nodeID).
				Warn("a pull lease of a node without a live session expired: no reference is recorded for it (a member's next sync records it)")
		}
		if g.recorded {
			b.DropLease(id, g.leaseID)
		}
		wctx, cancel := context.WithTimeout(ctx, leaseWriteTimeout)
		defer cancel()
		return rs.store.commit(wctx, b)
	})
	if err != nil {
		log.G(ctx).WithError(err).WithField("key", key).WithField("node", g.nodeID).
			Warn("a pull lease expired and its holder's reference could not be written; the lease is kept until it is")
		return false
	}
	g.recorded = false
	rs.noteActivity(id, now)
	return true
}

// checkSynced is the delete rule's second half alone: a delete is still
// granted only while every member is synced (a keepalive of its lease).
func (rs *references) checkSynced(resourceID string, now time.Time) error {
	return rs.members.allSynced(resourceID, now, nil)
}
