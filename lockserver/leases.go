package lockserver

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/containerd/log"

	"github.com/sharedcontent/sharedcontent/lockserver/api"
	"github.com/sharedcontent/sharedcontent/refcount"
)

// Leases survive a failover (docs/design.md §3.7, §7.2). A pull's lease
// is recorded in the store (refcount.LeaseRecord) when it is granted,
// before the grant is answered or handed to a waiter, as a delete's
// marker is (deletes.go); its unlock(success) drops the record in the
// transaction that adds the holder's reference, and so does its expiry
// (keepHolderRef); any other end of it (failure, cancel, unclaimed)
// drops it after, best-effort. An
// update's lease is recorded only when the coordinator closes (the
// leader's graceful hand-over, a restart), and the record is dropped
// once the coordinator that adopted it releases it.
//
// A coordinator that starts on a store adopts every recorded lease: the
// same lease ID, fence, node and request ID, held for a lease TTL from
// its start, so the holder's keepalives and unlock work there, and new
// requests for the resource queue behind it. Without that, the new
// coordinator granted the pull to a waiter while the old holder still
// downloaded, and each blob in flight at a failover was fetched up to 3
// times. A record left behind (a drop that failed, a coordinator that
// stopped first) only costs the next coordinator's waiters on that
// resource one lease TTL: nobody renews the adopted lease, and it
// expires.

// leaseWriteTimeout bounds a grant's or a release's write of a lease
// record, made under the shard's mutex: a store that cannot be reached
// (etcd partitioned away from the leader) must not wedge the shard, nor
// the Coordinator's Close that waits for its sweeper. The grant is then
// refused 503 and the client retries (at the next leader); a record whose
// write timed out may still land, and costs what a stale record costs.
const leaseWriteTimeout = 5 * time.Second

// commitLeases writes b, which holds lease records only, to the store
// directly: it changes no reference set, so the Manager's stripes and
// the nodes' hashes have no part in it, and a pull's grant does not pay
// for them. A write that times out is 503 unavailable.
func commitLeases(ctx context.Context, st *store, b *refcount.Batch) error {
	ctx, cancel := context.WithTimeout(ctx, leaseWriteTimeout)
	defer cancel()
	err := st.state.Commit(ctx, b)
	if errors.Is(err, context.DeadlineExceeded) && ctx.Err() != nil {
		err = fmt.Errorf("writing lease records: no answer from the store in %s: %v", leaseWriteTimeout, err)
	}
	return st.wrote(ctx, err)
}

// leaseRecord returns the stored record of g, a grant on resource id.
func leaseRecord(id string, g *grant) refcount.LeaseRecord {
	return refcount.LeaseRecord{ResourceID: id, Type: string(typeNames[g.typ]), Node: g.nodeID,
		RequestID: g.requestID, LeaseID: g.leaseID, Fence: g.fence}
}

// recordLease persists the record of the pull lease being granted to g.
func recordLease(ctx context.Context, st *store, id string, g *grant) error {
	if err := commitLeases(ctx, st, new(refcount.Batch).PutLease(leaseRecord(id, g))); err != nil {
		return err
	}
	g.recorded = true
	return nil
}

// dropLease drops the record of g, a lease of resource id that ended
// without a successful pull. A failed write is logged: the next
// coordinator adopts the lease and lets it expire. Callers hold the
// shard's mutex.
func dropLease(ctx context.Context, st *store, id string, g *grant) {
	if err := commitLeases(ctx, st, new(refcount.Batch).DropLease(id, g.leaseID)); err != nil {
		log.G(ctx).WithError(err).WithField("key", string(typeNames[g.typ])+":"+id).
			Warn("dropping a lease record; the next coordinator holds the lease for a lease TTL")
	}
}

// adoptLeases installs every recorded lease as a held grant, for a lease
// TTL from now. Two records of one key (one whose drop failed, and a
// later grant) keep the later fence; the other record is dropped.
func (lk *locks) adoptLeases(ctx context.Context) error {
	recs, err := lk.store.state.Leases(ctx)
	if err != nil {
		return err
	}
	now := lk.now()
	stale := new(refcount.Batch)
	adopted := 0
	for _, rec := range recs {
		t, ok := indexOf(api.OperationType(rec.Type))
		if !ok || t == idxDelete || rec.Node == "" || rec.RequestID == "" {
			log.G(ctx).WithField("resource", rec.ResourceID).WithField("type", rec.Type).Warn("dropping a lease record that cannot be a lease")
			stale.DropLease(rec.ResourceID, rec.LeaseID).Break()
			continue
		}
		sh := lk.shardFor(rec.ResourceID)
		r := sh.resource(rec.ResourceID)
		k := &r.keys[t]
		if old := k.holder; old != nil {
			if old.fence > rec.Fence {
				stale.DropLease(rec.ResourceID, rec.LeaseID).Break()
				continue
			}
			stale.DropLease(rec.ResourceID, old.leaseID).Break()
			adopted--
		}
		k.holder = &grant{
			request:  request{typ: t, nodeID: rec.Node, requestID: rec.RequestID},
			leaseID:  rec.LeaseID,
			fence:    rec.Fence,
			acquired: now,
			expires:  now.Add(lk.cfg.LeaseTTL),
			claimed:  true,
			recorded: true,
		}
		lk.reap.note(rec.ResourceID, k.holder)
		adopted++
	}
	if err := commitLeases(ctx, lk.store, stale); err != nil {
		return err
	}
	if adopted > 0 {
		log.G(ctx).WithField("leases", adopted).Info("adopted the leases the previous coordinator granted")
	}
	return nil
}

// saveLeases records every update lease held now and not recorded yet,
// one record a group (docs/design.md §7.2, graceful hand-over): the
// coordinator that starts next on the store adopts them. Close calls it
// once no unlock is served any more (closing), so no record is written
// of a lease whose release was answered. Pull leases are recorded
// already.
func (lk *locks) saveLeases(ctx context.Context) error {
	b := new(refcount.Batch)
	for _, sh := range lk.shards {
		sh.mu.Lock()
		for _, r := range sh.resources {
			if g := r.keys[idxUpdate].holder; g != nil && !g.recorded {
				b.PutLease(leaseRecord(r.id, g)).Break()
			}
		}
		sh.mu.Unlock()
	}
	if b.Len() == 0 {
		return nil
	}
	if err := commitLeases(ctx, lk.store, b); err != nil {
		return err
	}
	log.G(ctx).WithField("leases", b.Len()).Info("recorded the update leases held, for the next coordinator")
	return nil
}
