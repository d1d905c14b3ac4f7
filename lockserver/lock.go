package lockserver

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/containerd/log"

	"github.com/sharedcontent/sharedcontent/lockserver/api"
)

// A lock request's walk (docs/design.md §3.3, §3.4): Lock grants, queues
// or refuses; Unlock, Keepalive and Cancel act on a held or queued
// request; grant, release, complete and advance move a resource's keys
// from one holder to the next. The rules on references come from the
// references part (lk.refs), asked under the resource's shard mutex.

// Lock handles POST /lock (docs/design.md §3.3). It never blocks on other
// holders: it answers acquired, skip, queued, or an error matching
// api.ErrInUse or api.ErrLocked. A queued caller learns of its turn through
// Subscribe or Status.
func (lk *locks) Lock(ctx context.Context, req api.LockRequest) (api.LockResponse, error) {
	t, err := validateLock(&req)
	if err != nil {
		return api.LockResponse{}, err
	}
	now := lk.now()
	sh := lk.shardFor(req.ResourceID)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	r := sh.resource(req.ResourceID)
	defer sh.tidy(r)
	k := &r.keys[t]

	if resp, ok := lk.answered(k, req, now); ok {
		return resp, nil
	}
	if err := sh.refuseCancelled(t, req); err != nil {
		return api.LockResponse{}, err
	}
	if err := lk.admit(ctx, t, req, now); err != nil {
		return api.LockResponse{}, err
	}
	// A retained success is only an answer while nothing incompatible is
	// in flight: a pull must not skip while a delete removes the blob. Nor
	// is a delete's success an answer to the reaper, which has just listed
	// the blob's file: the blob is back (written by a node that failed
	// open, docs/design.md §8.8), and skipping would keep it for
	// completed_ttl.
	if c := k.completed; c != nil && !c.lapsed && now.Sub(c.at) < lk.cfg.CompletedTTL && r.compatibleWith(t) && (t != idxDelete || req.Reap == "") {
		lk.metrics.result(t, resultSkipped)
		_, added := c.refs[requestKey{req.NodeID, req.RequestID}] // asked again after its skip told it
		return api.LockResponse{RequestID: req.RequestID, Skip: true, RefAdded: req.AddRef && added}, nil
	}
	q := request{typ: t, nodeID: req.NodeID, requestID: req.RequestID, reap: req.Reap, addRef: req.AddRef}
	if k.holder == nil && k.queue.Len() == 0 && r.compatibleWith(t) {
		g, err := lk.grant(r, q, now)
		if err != nil {
			return api.LockResponse{}, err
		}
		g.claimed = true
		lk.metrics.result(t, resultAcquired)
		lk.notifyWatchers(r, t, api.EventGranted, g.nodeID, true, "")
		return g.response(lk.cfg.LeaseTTL), nil
	}
	return lk.enqueue(r, q, req.Wait, now)
}

// answered returns the answer already given to this request, if any: a
// retry gets its grant or its place in the queue again.
func (lk *locks) answered(k *key, req api.LockRequest, now time.Time) (api.LockResponse, bool) {
	if g := k.holder; g != nil && g.is(req.NodeID, req.RequestID) {
		g.claimed = true
		return g.response(lk.cfg.LeaseTTL), true
	}
	if w := k.queue.Get(req.NodeID, req.RequestID); w != nil {
		w.lastSeen = now
		return api.LockResponse{RequestID: req.RequestID, Queued: true, Position: k.queue.Position(w)}, true
	}
	return api.LockResponse{}, false
}

// admit applies the reference rules of a new delete (docs/design.md §8.7) or update
// (update_requires_no_ref).
func (lk *locks) admit(ctx context.Context, t typeIndex, req api.LockRequest, now time.Time) error {
	switch t {
	case idxDelete:
		if err := lk.refs.checkDelete(ctx, req, now); err != nil {
			switch {
			case errors.Is(err, api.ErrUnsynced), errors.Is(err, api.ErrDuplicateNode):
				lk.metrics.result(t, resultUnsynced)
			case errors.Is(err, api.ErrInUse):
				lk.metrics.result(t, resultInUse)
			}
			return err
		}
	case idxUpdate:
		if req.ResourceID == api.ReapLockResource {
			if err := lk.reap.may(ctx, req.NodeID, now); err != nil {
				return err
			}
		}
		if lk.cfg.UpdateRequiresNoRef {
			if err := lk.refs.checkNoOtherRefs(ctx, req.ResourceID, req.NodeID); err != nil {
				lk.metrics.result(t, resultInUse)
				return err
			}
		}
	}
	return nil
}

// enqueue queues q behind the holders of r, if it asked to wait (nil: the
// server's default) and its node is under its bound.
func (lk *locks) enqueue(r *resource, q request, wait *bool, now time.Time) (api.LockResponse, error) {
	t, k := q.typ, &r.keys[q.typ]
	waits := lk.cfg.WaitByDefault
	if wait != nil {
		waits = *wait
	}
	if !waits {
		lk.metrics.result(t, resultLocked)
		return api.LockResponse{}, lk.lockedError(r, t)
	}
	if !lk.waiting.tryAdd(q.nodeID) {
		lk.metrics.result(t, resultLocked)
		return api.LockResponse{}, fmt.Errorf("node %s has %d requests queued (the limit): %w", q.nodeID, lk.cfg.MaxWaitersPerNode, api.ErrTooManyRequests)
	}
	if lk.trace != nil {
		lk.trace("queued", t, r.id, q.requestID)
	}
	k.queue.Push(&waiter{request: q, queued: now, lastSeen: now})
	lk.metrics.result(t, resultQueued)
	lk.metrics.queueDepth[t].Inc()
	return api.LockResponse{RequestID: q.requestID, Queued: true, Position: k.queue.Len()}, nil
}

// Unlock handles POST /unlock (docs/design.md §3.4). Only the holder of the
// lease may release; a retry of a release that already happened, with the
// same outcome, succeeds again.
func (lk *locks) Unlock(ctx context.Context, req api.UnlockRequest) (api.UnlockResponse, error) {
	t, err := validateUnlock(&req)
	if err != nil {
		return api.UnlockResponse{}, err
	}
	now := lk.now()
	sh := lk.shardFor(req.ResourceID)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if lk.closing.Load() {
		// Closing: the lease may be recorded for the next coordinator
		// (leases.go), where the holder's retry releases it.
		return api.UnlockResponse{}, fmt.Errorf("%s:%s: the coordinator is closing: %w", req.Type, req.ResourceID, api.ErrUnavailable)
	}
	r := sh.resources[req.ResourceID]
	if r == nil || r.keys[t].holder == nil || r.keys[t].holder.leaseID != req.LeaseID {
		if key, ok := leaseKeyOf(req.LeaseID); ok {
			rel, ok := sh.released[key]
			if ok && rel.success == req.Success && rel.typ == t && rel.resource == hashID(req.ResourceID) &&
				(req.NodeID == "" || rel.node == hashID(req.NodeID)) {
				return api.UnlockResponse{Released: true}, nil
			}
		}
		return api.UnlockResponse{}, fmt.Errorf("%s:%s: lease %s is not held (expired, released or wrong key): %w",
			req.Type, req.ResourceID, req.LeaseID, api.ErrNotHolder)
	}
	g := r.keys[t].holder
	if err := ownedBy(g, req.NodeID); err != nil {
		return api.UnlockResponse{}, err
	}
	defer sh.tidy(r)
	if req.Success && t == idxDelete {
		if reason, err := lk.refs.checkDeleteUnlock(ctx, req.ResourceID, g, now); err != nil {
			lk.release(ctx, sh, r, t, false, reason, now)
			return api.UnlockResponse{}, err
		}
	}
	if req.Success {
		// The reference set changes on disk first: if it cannot, the
		// unlock changes nothing (the lock stays held, nobody is told)
		// and the holder retries it.
		added, written, err := lk.refs.recordSuccess(ctx, req.ResourceID, g, r.keys[idxDelete].completed != nil, askers(&r.keys[t]), now)
		if err != nil {
			return api.UnlockResponse{}, fmt.Errorf("%s:%s: recording success: %w", req.Type, req.ResourceID, err)
		}
		defer written()
		if t != idxUpdate {
			lk.refs.noteActivity(req.ResourceID, now)
			lk.complete(r, t, g, added, now)
		}
	} else if req.Error != "" {
		log.G(ctx).WithField("key", string(req.Type)+":"+req.ResourceID).WithField("node", g.nodeID).
			WithField("error", req.Error).Debug("holder reported failure")
	}
	lk.release(ctx, sh, r, t, req.Success, "unlock", now)
	return api.UnlockResponse{Released: true}, nil
}

// Keepalive handles POST /lock/keepalive: it renews the holder's lease.
func (lk *locks) Keepalive(ctx context.Context, req api.KeepaliveRequest) (api.KeepaliveResponse, error) {
	t, err := validateKey(req.Type, req.ResourceID)
	if err == nil {
		err = validateID("lease_id", req.LeaseID)
	}
	if err != nil {
		return api.KeepaliveResponse{}, err
	}
	sh := lk.shardFor(req.ResourceID)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	r := sh.resources[req.ResourceID]
	if r == nil || r.keys[t].holder == nil || r.keys[t].holder.leaseID != req.LeaseID {
		return api.KeepaliveResponse{}, fmt.Errorf("%s:%s: lease %s is not held: %w", req.Type, req.ResourceID, req.LeaseID, api.ErrNotHolder)
	}
	if err := ownedBy(r.keys[t].holder, req.NodeID); err != nil {
		return api.KeepaliveResponse{}, err
	}
	now := lk.now()
	if t == idxDelete {
		// A delete is still granted only while every member is synced: a
		// deleter checks its lease right before it removes the file.
		if err := lk.refs.checkSynced(req.ResourceID, now); err != nil {
			defer sh.tidy(r)
			lk.release(context.WithoutCancel(ctx), sh, r, t, false, "unsynced", now)
			return api.KeepaliveResponse{}, err
		}
	}
	g := r.keys[t].holder
	if err := lk.reap.holdOver(req.ResourceID, g, now); err != nil {
		defer sh.tidy(r)
		lk.release(context.WithoutCancel(ctx), sh, r, t, false, "held too long", now)
		return api.KeepaliveResponse{}, err
	}
	g.expires = now.Add(lk.cfg.LeaseTTL)
	g.claimed = true
	lk.reap.note(req.ResourceID, g)
	return api.KeepaliveResponse{LeaseTTLMs: lk.cfg.LeaseTTL.Milliseconds()}, nil
}

// Cancel handles POST /lock/cancel: the request leaves its queue, or gives
// back the grant it received (as a failure, so the queue advances).
// Cancelling an unknown request is not an error; it leaves a tombstone
// that refuses the request should it arrive after all (cancelled.go).
func (lk *locks) Cancel(ctx context.Context, req api.CancelRequest) error {
	t, err := validateKey(req.Type, req.ResourceID)
	if err == nil {
		err = validateID("node_id", req.NodeID)
	}
	if err == nil {
		err = validateID("request_id", req.RequestID)
	}
	if err != nil {
		return err
	}
	sh := lk.shardFor(req.ResourceID)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	now := lk.now()
	r := sh.resources[req.ResourceID]
	if r == nil {
		sh.noteCancelled(cancelKey{t, req.ResourceID, req.NodeID, req.RequestID}, now)
		return nil
	}
	defer sh.tidy(r)
	k := &r.keys[t]
	switch w := k.queue.Get(req.NodeID, req.RequestID); {
	case w != nil:
		lk.dropWaiter(k, w)
	case k.holder != nil && k.holder.is(req.NodeID, req.RequestID):
		lk.release(ctx, sh, r, t, false, "cancelled", now)
	default:
		// Not seen yet, or already ended: either way no grant may
		// follow (cancelled.go).
		sh.noteCancelled(cancelKey{t, req.ResourceID, req.NodeID, req.RequestID}, now)
	}
	return nil
}

// ownedBy checks that a request naming node (an unlock, a keepalive)
// comes from the holder of g. An empty node names nobody: the lease ID
// alone is the holder's proof.
func ownedBy(g *grant, node string) error {
	if node != "" && node != g.nodeID {
		return fmt.Errorf("%s: the lease belongs to another node than %s: %w", typeNames[g.typ], node, api.ErrNotHolder)
	}
	return nil
}

// grant makes req the holder of its key in r.
func (lk *locks) grant(r *resource, req request, now time.Time) (*grant, error) {
	fence, err := lk.fences.next()
	if err := lk.store.wrote(context.Background(), err); err != nil {
		return nil, fmt.Errorf("%s: %w", typeNames[req.typ], err)
	}
	g := &grant{
		request:  req,
		leaseID:  newID(),
		fence:    fence,
		acquired: now,
		expires:  now.Add(lk.cfg.LeaseTTL),
		claimBy:  now.Add(lk.cfg.ClaimTimeout),
	}
	switch req.typ {
	case idxDelete:
		if err := markDelete(context.Background(), lk.store, r.id, g); err != nil {
			return nil, fmt.Errorf("%s: %w", typeNames[req.typ], err)
		}
	case idxPull:
		if err := recordLease(context.Background(), lk.store, r.id, g); err != nil {
			return nil, fmt.Errorf("%s: %w", typeNames[req.typ], err)
		}
	}
	r.keys[req.typ].holder = g
	lk.reap.note(r.id, g)
	if lk.trace != nil {
		lk.trace("granted", req.typ, r.id, req.requestID)
	}
	return g, nil
}

// response is the answer that hands g to its request: acquired, with the
// lease, its fence and the lease TTL.
func (g *grant) response(leaseTTL time.Duration) api.LockResponse {
	return api.LockResponse{
		RequestID:  g.requestID,
		Acquired:   true,
		LeaseID:    g.leaseID,
		Fence:      g.fence,
		LeaseTTLMs: leaseTTL.Milliseconds(),
	}
}

// release ends the holder of r.keys[t] and advances the resource's queues.
// The reference set has already been updated for a success.
func (lk *locks) release(ctx context.Context, sh *shard, r *resource, t typeIndex, success bool, reason string, now time.Time) {
	k := &r.keys[t]
	g := k.holder
	k.holder = nil
	lk.reap.forget(r.id, g, now)
	if key, ok := leaseKeyOf(g.leaseID); ok {
		sh.released[key] = released{success: success, typ: t, resource: hashID(r.id), node: hashID(g.nodeID), at: now.UnixNano()}
	}
	lk.metrics.hold[t].Observe(now.Sub(g.acquired).Seconds())
	if t == idxDelete && !success {
		lk.endDelete(ctx, r, g, reason, now)
	}
	if g.recorded && (!success || t != idxPull) {
		// A successful pull dropped its record with its reference.
		dropLease(ctx, lk.store, r.id, g)
	}
	switch reason {
	case "expired", "unclaimed":
		lk.metrics.expiries.WithLabelValues(string(typeNames[t]), reason).Inc()
		log.G(ctx).WithField("key", string(typeNames[t])+":"+r.id).WithField("node", g.nodeID).
			WithField("reason", reason).Info("lock released without the holder")
	}

	if success && t != idxUpdate {
		lk.notifyWatchers(r, t, api.EventCompleted, g.nodeID, true, reason)
	} else {
		lk.notifyWatchers(r, t, api.EventReleased, g.nodeID, success, reason)
	}
	lk.advance(ctx, r, now)
}

// askers returns k's waiters that asked for their reference with a skip
// (api.LockRequest.AddRef).
func askers(k *key) []requestKey {
	var out []requestKey
	k.queue.Each(func(w *waiter) bool {
		if w.addRef {
			out = append(out, w.key())
		}
		return true
	})
	return out
}

// complete records that the holder g of r.keys[t] (a pull or a delete)
// succeeded: everyone waiting on the key skips, and so do newcomers for
// CompletedTTL. Unlock calls it once the reference set is written: an
// unlock whose write fails must change nothing (docs/design.md §3.4), so no waiter may
// have been told to skip. added are the waiters whose references that
// write recorded: their skips say so (RefAdded).
func (lk *locks) complete(r *resource, t typeIndex, g *grant, added map[requestKey]struct{}, now time.Time) {
	k := &r.keys[t]
	k.completed = &completion{nodeID: g.nodeID, at: now, fence: g.fence, refs: added}
	if t == idxPull {
		r.keys[idxDelete].completed = nil
	} else {
		r.keys[idxPull].completed = nil
	}
	k.queue.Each(func(w *waiter) bool {
		if lk.trace != nil {
			lk.trace("skipped", t, r.id, w.requestID)
		}
		ev := r.event(t, api.EventCompleted, w.nodeID, w.requestID, true, "")
		_, ev.RefAdded = added[w.key()]
		lk.streams.tell(w, ev)
		lk.metrics.result(t, resultSkipped)
		lk.metrics.wait[t].Observe(now.Sub(w.queued).Seconds())
		lk.metrics.queueDepth[t].Dec()
		lk.waiting.done(w.nodeID)
		return true
	})
	k.queue.Clear()
}

// advance grants the head of every queue of r that is free and compatible
// with the current holders, earliest-queued first, until none is.
func (lk *locks) advance(ctx context.Context, r *resource, now time.Time) {
	for {
		next := typeIndex(-1)
		for t := range numTypes {
			k := &r.keys[t]
			if k.holder != nil || k.queue.Len() == 0 || !r.compatibleWith(t) {
				continue
			}
			if next < 0 || k.queue.Front().queued.Before(r.keys[next].queue.Front().queued) {
				next = t
			}
		}
		if next < 0 {
			return
		}
		k := &r.keys[next]
		w := k.queue.Front()
		lk.dropWaiter(k, w)
		lk.metrics.wait[next].Observe(now.Sub(w.queued).Seconds())
		if err := lk.refs.checkGrantRefs(ctx, r.id, w.request); err != nil {
			// The resource gained references while the delete (or update)
			// waited: refuse it now instead of breaking them.
			lk.metrics.result(next, resultInUse)
			if lk.trace != nil {
				lk.trace("refused", next, r.id, w.requestID)
			}
			ev := r.event(next, api.EventError, w.nodeID, w.requestID, false, "")
			body := api.ErrorBody(err)
			ev.Error = &body
			lk.streams.tell(w, ev)
			continue
		}
		g, err := lk.grant(r, w.request, now)
		if err != nil {
			ev := r.event(next, api.EventError, w.nodeID, w.requestID, false, "")
			body := api.ErrorBody(err)
			ev.Error = &body
			lk.streams.tell(w, ev)
			continue
		}
		lk.metrics.handoffs[next].Inc()
		if lk.streams.listens(w) {
			ev := r.event(next, api.EventGranted, w.nodeID, w.requestID, true, "")
			lease := g.response(lk.cfg.LeaseTTL)
			ev.Lease = &lease
			lk.streams.tell(w, ev) // from now on keepalives keep the lease
		}
		lk.notifyWatchers(r, next, api.EventGranted, g.nodeID, true, "")
	}
}

// lockedError refuses a request of type t on r that does not wait: who
// holds the key or an incompatible one, or how many are queued ahead.
func (lk *locks) lockedError(r *resource, t typeIndex) error {
	for held := range numTypes {
		if g := r.keys[held].holder; g != nil && (held == t || !compatible[held][t]) {
			return fmt.Errorf("%s:%s: held by %s:%s of node %s for %s: %w", typeNames[t], r.id,
				typeNames[held], r.id, g.nodeID, lk.now().Sub(g.acquired).Round(time.Millisecond), api.ErrLocked)
		}
	}
	return fmt.Errorf("%s:%s: %d request(s) queued ahead: %w", typeNames[t], r.id, r.keys[t].queue.Len(), api.ErrLocked)
}

// dropWaiter removes w from k's queue.
func (lk *locks) dropWaiter(k *key, w *waiter) {
	k.queue.Remove(w)
	lk.metrics.queueDepth[w.typ].Dec()
	lk.waiting.done(w.nodeID)
}
