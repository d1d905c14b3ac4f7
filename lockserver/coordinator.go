package lockserver

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/fnv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/containerd/log"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sharedcontent/sharedcontent/internal/failpoint"
	"github.com/sharedcontent/sharedcontent/lockserver/api"
	"github.com/sharedcontent/sharedcontent/refcount"
)

// Coordinator is the coordinator's in-process API: the lock manager of docs/design.md §3.
// All methods are safe for concurrent use. Every operation on one resource
// runs under that resource's shard mutex, so the cross-type rules and the
// reference counts are checked atomically; different shards never contend.
type Coordinator struct {
	cfg    Config
	refs   *refcount.Manager
	state  refcount.Storage // the Manager's storage; written only through it
	fences *fenceSource
	// memberPart: the members, their sessions and syncs, and the
	// cluster's identity (memberpart.go).
	*memberPart
	// writeFailing is set from a failed database write until one
	// succeeds (health.go).
	writeFailing atomic.Bool
	metrics      *metrics
	shards       []*shard
	now          func() time.Time
	// started is when this Coordinator started (monotonic, by now): session
	// answers are stamped with the uptime since, and members' absence
	// counts from here at the earliest (members.go).
	started time.Time
	// reaper is the grant of the reaper's lock, nil when none (reap.go).
	reaper atomic.Pointer[reapHolder]
	// reapCut: node → when its hold of the reaper's lock reached the
	// bound (reap.go); protected by the reap lock's shard mutex.
	reapCut map[string]time.Time
	// trace, when set (by tests), is called under the shard mutex at every
	// enqueue and grant.
	trace func(event string, t typeIndex, resourceID, requestID string)

	// closing is set when Close begins: unlocks are refused from then
	// on, so the update leases Close records for the next coordinator
	// are exactly those still held (leases.go).
	closing atomic.Bool

	// waiting counts each node's queued requests (bounds.go).
	waiting *nodeCounter
	// nodeStreams are the open node streams (nodestream.go).
	nodeStreams *nodeStreams

	stop chan struct{} // closed by Close; stops the sweepers
	wg   sync.WaitGroup
}

// shard owns the resources whose resource_id hashes to it.
type shard struct {
	mu        sync.Mutex
	resources map[string]*resource  // protected by mu
	released  map[leaseKey]released // lease id → outcome; protected by mu
	// free holds forgotten resources for reuse: a lock on an idle key
	// (the common case) would otherwise allocate one per acquire.
	free  []*resource // protected by mu
	peaks mapPeaks    // protected by mu; for shrink (sweep.go)
	// recent maps a resource to the uptime of its last pull or reference
	// change, for the reap grace; every resource counts as active at
	// recentFloor (the map overflowed), and prunedAt is the uptime of the
	// last prune (reap.go). Protected by mu.
	recent      map[string]time.Duration
	recentFloor time.Duration
	prunedAt    time.Duration
	// adding maps a resource to the nodes whose references to it are
	// ordered but not yet durable, with how many each (refs.go addRef).
	// Protected by addingMu, taken after mu or alone: an add that has
	// become durable leaves it without mu, so the adds one commit ends
	// do not queue for mu in front of the shard's locks and unlocks.
	addingMu sync.Mutex
	adding   map[string]map[string]int
}

// maxFreeResources bounds a shard's free list.
const maxFreeResources = 64

// Options are the collaborators of a Coordinator.
type Options struct {
	// Refs holds the reference sets. Required. Its storage holds the
	// rest of the coordinator's durable state too (the fence high-water
	// mark, the identity, the members and the deletes), so that one
	// transaction can change them together. On a memory storage, fences
	// restart from 1 and every Coordinator is a new cluster.
	Refs *refcount.Manager
	// Registerer receives the Prometheus metrics. Nil registers nowhere.
	Registerer prometheus.Registerer
	// Now is the Coordinator's clock; nil: time.Now. Tests move it.
	Now func() time.Time
}

// NewCoordinator starts a Coordinator and its per-shard sweepers. Call Close to stop
// them.
func NewCoordinator(cfg Config, opts Options) (*Coordinator, error) {
	now := opts.Now
	if now == nil {
		now = time.Now
	}
	return newCoordinator(cfg, opts, now)
}

// newCoordinator is NewCoordinator on the clock now (tests move it).
func newCoordinator(cfg Config, opts Options, now func() time.Time) (*Coordinator, error) {
	cfg = cfg.withSyncDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("lockserver config: %w: %w", api.ErrInvalidArgument, err)
	}
	if opts.Refs == nil {
		return nil, fmt.Errorf("lockserver: refcount manager is required: %w", api.ErrInvalidArgument)
	}
	state := opts.Refs.Storage()
	m, err := newMetrics(opts.Registerer)
	if err != nil {
		return nil, err
	}
	l := &Coordinator{
		cfg:     cfg,
		refs:    opts.Refs,
		state:   state,
		metrics: m,
		shards:  make([]*shard, cfg.Shards),
		now:     now,
		started: now(),
		waiting: newNodeCounter(cfg.MaxWaitersPerNode),
		stop:    make(chan struct{}),
	}
	l.memberPart = &memberPart{cfg: cfg, refs: opts.Refs, state: state, metrics: m, now: func() time.Time { return l.now() }, started: l.started,
		commit: l.commit, members: map[string]*member{}, syncLimits: newSyncLimits(cfg)}
	if l.syncMetrics, err = newSyncMetrics(opts.Registerer); err != nil {
		return nil, err
	}
	l.nodeStreams = newNodeStreams(cfg.LeaseTTL, func() time.Time { return l.now() })
	ctx := context.Background()
	if l.fences, err = l.newFenceSource(ctx, DefaultFenceBlock); err != nil {
		return nil, err
	}
	if err := l.startEpoch(ctx); err != nil {
		return nil, err
	}
	if err := l.loadMembers(ctx); err != nil {
		return nil, err
	}
	// The members' hashes for syncs by hash: one walk of the references,
	// or a standby's (docs/design.md §7.2).
	if err := l.buildHashes(ctx); err != nil {
		return nil, err
	}
	for i := range l.shards {
		l.shards[i] = &shard{resources: make(map[string]*resource), released: make(map[leaseKey]released)}
	}
	if err := l.loadDeletes(ctx); err != nil {
		return nil, err
	}
	if err := l.adoptLeases(ctx); err != nil {
		return nil, fmt.Errorf("lockserver: adopting the recorded leases: %w", err)
	}
	for _, sh := range l.shards {
		l.wg.Add(1)
		go l.sweepLoop(sh)
	}
	l.wg.Add(1)
	go l.syncSweepLoop()
	return l, nil
}

// buildHashes gets the members' hashes (refcount.Manager.BuildHashes),
// counts how and logs it.
func (l *Coordinator) buildHashes(ctx context.Context) error {
	start := time.Now()
	if err := l.refs.BuildHashes(ctx); err != nil {
		return fmt.Errorf("lockserver: hashing the references: %w", err)
	}
	how, warmErr := l.refs.HashesBuilt()
	l.metrics.hashesBuilt.WithLabelValues(how).Inc()
	entry := log.L.WithField("how", how).WithField("seconds", time.Since(start).Seconds())
	if warmErr != nil {
		entry.WithError(warmErr).Warn("the standby's reference hashes were not usable: walked every reference")
		return nil
	}
	entry.Debug("the members' reference hashes are built")
	return nil
}

// Config returns the configuration the Coordinator runs with.
func (l *Coordinator) Config() Config { return l.cfg }

// Close stops the sweepers and ends every event subscription. The update
// leases held are recorded for the next coordinator on the store (pull
// leases are already); queues are dropped with the Coordinator, and
// unlocks are refused from the start of Close.
func (l *Coordinator) Close() error {
	select {
	case <-l.stop:
		return nil
	default:
	}
	l.closing.Store(true)
	close(l.stop)
	l.wg.Wait()
	if err := l.saveLeases(context.Background()); err != nil {
		log.L.WithError(err).Warn("the update leases held are not recorded; their holders' unlocks fail at the next coordinator")
	}
	if err := l.flushSeen(context.Background()); err != nil {
		log.L.WithError(err).Warn("the members' last session times are not saved; GET /nodes shows older ones after the restart")
	}
	for _, sh := range l.shards {
		sh.mu.Lock()
		for _, r := range sh.resources {
			for t := range r.keys {
				k := &r.keys[t]
				for s := range k.watchers {
					s.end()
				}
				k.queue.Each(func(w *waiter) bool {
					w.sub.end()
					return true
				})
			}
		}
		sh.mu.Unlock()
	}
	l.nodeStreams.closeAll()
	return nil
}

func (l *Coordinator) shardFor(resourceID string) *shard {
	return l.shards[hashID(resourceID)%uint32(len(l.shards))]
}

// hashID is FNV-1a of a resource ID.
func hashID(resourceID string) uint32 {
	h := fnv.New32a()
	h.Write([]byte(resourceID))
	return h.Sum32()
}

// resource returns the resource's state, creating it. Callers hold sh.mu
// and call sh.tidy(r) when done.
func (sh *shard) resource(id string) *resource {
	r := sh.resources[id]
	if r == nil {
		if n := len(sh.free); n > 0 {
			r, sh.free = sh.free[n-1], sh.free[:n-1]
			r.id = id
		} else {
			r = &resource{id: id}
		}
		sh.resources[id] = r
		sh.peaks.resources = max(sh.peaks.resources, len(sh.resources))
	}
	return r
}

// tidy forgets r once nothing is held, queued, retained or watched, and
// keeps it for reuse. r must not be used after (callers tidy last).
func (sh *shard) tidy(r *resource) {
	if !r.empty() || sh.resources[r.id] != r {
		return
	}
	delete(sh.resources, r.id)
	if len(sh.free) < maxFreeResources {
		*r = resource{}
		sh.free = append(sh.free, r)
	}
}

// Lock handles POST /lock (docs/design.md §3.3). It never blocks on other
// holders: it answers acquired, skip, queued, or an error matching
// api.ErrInUse or api.ErrLocked. A queued caller learns of its turn through
// Subscribe or Status.
func (l *Coordinator) Lock(ctx context.Context, req api.LockRequest) (api.LockResponse, error) {
	t, err := validateLock(&req)
	if err != nil {
		return api.LockResponse{}, err
	}
	now := l.now()
	sh := l.shardFor(req.ResourceID)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	r := sh.resource(req.ResourceID)
	defer sh.tidy(r)
	k := &r.keys[t]

	if resp, ok := l.answered(k, req, now); ok {
		return resp, nil
	}
	if err := l.admit(ctx, t, req, now); err != nil {
		return api.LockResponse{}, err
	}
	// A retained success is only an answer while nothing incompatible is
	// in flight: a pull must not skip while a delete removes the blob.
	if c := k.completed; c != nil && !c.lapsed && now.Sub(c.at) < l.cfg.CompletedTTL && r.compatibleWith(t) {
		l.metrics.result(t, resultSkipped)
		return api.LockResponse{RequestID: req.RequestID, Skip: true}, nil
	}
	q := request{typ: t, nodeID: req.NodeID, requestID: req.RequestID, reap: req.Reap}
	if k.holder == nil && k.queue.Len() == 0 && r.compatibleWith(t) {
		g, err := l.grant(r, q, now)
		if err != nil {
			return api.LockResponse{}, err
		}
		g.claimed = true
		l.metrics.result(t, resultAcquired)
		l.notifyWatchers(r, t, api.EventGranted, g.nodeID, true, "")
		return l.grantResponse(g), nil
	}
	return l.enqueue(r, q, req.Wait, now)
}

// answered returns the answer already given to this request, if any: a
// retry gets its grant or its place in the queue again.
func (l *Coordinator) answered(k *key, req api.LockRequest, now time.Time) (api.LockResponse, bool) {
	if g := k.holder; g != nil && g.is(req.NodeID, req.RequestID) {
		g.claimed = true
		return l.grantResponse(g), true
	}
	if w := k.queue.Get(req.NodeID, req.RequestID); w != nil {
		w.lastSeen = now
		return api.LockResponse{RequestID: req.RequestID, Queued: true, Position: k.queue.Position(w)}, true
	}
	return api.LockResponse{}, false
}

// admit applies the reference rules of a new delete (docs/design.md §8.7) or update
// (update_requires_no_ref).
func (l *Coordinator) admit(ctx context.Context, t typeIndex, req api.LockRequest, now time.Time) error {
	switch t {
	case idxDelete:
		if err := l.checkDelete(ctx, req, now); err != nil {
			switch {
			case errors.Is(err, api.ErrUnsynced), errors.Is(err, api.ErrDuplicateNode):
				l.metrics.result(t, resultUnsynced)
			case errors.Is(err, api.ErrInUse):
				l.metrics.result(t, resultInUse)
			}
			return err
		}
	case idxUpdate:
		if req.ResourceID == api.ReapLockResource {
			if err := l.mayReap(ctx, req.NodeID, now); err != nil {
				return err
			}
		}
		if l.cfg.UpdateRequiresNoRef {
			if err := l.checkNoOtherRefs(ctx, req.ResourceID, req.NodeID); err != nil {
				l.metrics.result(t, resultInUse)
				return err
			}
		}
	}
	return nil
}

// enqueue queues q behind the holders of r, if it asked to wait (nil: the
// server's default) and its node is under its bound.
func (l *Coordinator) enqueue(r *resource, q request, wait *bool, now time.Time) (api.LockResponse, error) {
	t, k := q.typ, &r.keys[q.typ]
	waits := l.cfg.AllowMultiNodeDownload
	if wait != nil {
		waits = *wait
	}
	if !waits {
		l.metrics.result(t, resultLocked)
		return api.LockResponse{}, l.lockedError(r, t)
	}
	if !l.waiting.tryAdd(q.nodeID) {
		l.metrics.result(t, resultLocked)
		return api.LockResponse{}, fmt.Errorf("node %s has %d requests queued (the limit): %w", q.nodeID, l.cfg.MaxWaitersPerNode, api.ErrTooManyRequests)
	}
	if l.trace != nil {
		l.trace("queued", t, r.id, q.requestID)
	}
	k.queue.Push(&waiter{request: q, queued: now, lastSeen: now})
	l.metrics.result(t, resultQueued)
	l.metrics.queueDepth[t].Inc()
	return api.LockResponse{RequestID: q.requestID, Queued: true, Position: k.queue.Len()}, nil
}

// Unlock handles POST /unlock (docs/design.md §3.4). Only the holder of the
// lease may release; a retry of a release that already happened, with the
// same outcome, succeeds again.
func (l *Coordinator) Unlock(ctx context.Context, req api.UnlockRequest) (api.UnlockResponse, error) {
	t, err := validateUnlock(&req)
	if err != nil {
		return api.UnlockResponse{}, err
	}
	now := l.now()
	sh := l.shardFor(req.ResourceID)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if l.closing.Load() {
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
		if reason, err := l.checkDeleteUnlock(ctx, req.ResourceID, g, now); err != nil {
			l.release(ctx, sh, r, t, false, reason, now)
			return api.UnlockResponse{}, err
		}
	}
	if req.Success {
		// The reference set changes on disk first: if it cannot, the
		// unlock changes nothing (the lock stays held, nobody is told)
		// and the holder retries it.
		var err error
		switch t {
		case idxPull:
			// The reference rule (refrule.go): refused, the unlock
			// changes nothing, as below.
			written, rerr := l.admitRef(g.nodeID, req.ResourceID, now)
			if rerr != nil {
				return api.UnlockResponse{}, fmt.Errorf("%s:%s: recording success: %w", req.Type, req.ResourceID, rerr)
			}
			defer written()
			failpoint.Inject(failpoint.CoordUnlockPullBefore)
			b := new(refcount.Batch).AddRef(req.ResourceID, g.nodeID)
			if g.recorded {
				// The lease's record goes with the reference it ends in.
				b.DropLease(req.ResourceID, g.leaseID)
			}
			if r.keys[idxDelete].completed != nil {
				// The pull ends the delete's completion, on disk too.
				b.DropDeleted(req.ResourceID)
			}
			err = l.refs.Commit(ctx, b)
		case idxDelete:
			failpoint.Inject(failpoint.CoordUnlockDeleteBefore)
			err = l.refs.Commit(ctx, deleted(req.ResourceID, g.nodeID, g.reap, g.fence, now))
		}
		if err := l.wrote(ctx, err); err != nil {
			return api.UnlockResponse{}, fmt.Errorf("%s:%s: recording success: %w", req.Type, req.ResourceID, err)
		}
		switch t {
		case idxPull:
			failpoint.Inject(failpoint.CoordUnlockPullAfter)
		case idxDelete:
			failpoint.Inject(failpoint.CoordUnlockDeleteAfter)
		}
		if t != idxUpdate {
			l.noteActivity(sh, req.ResourceID, now)
			l.complete(r, t, g, now)
		}
	} else if req.Error != "" {
		log.G(ctx).WithField("key", string(req.Type)+":"+req.ResourceID).WithField("node", g.nodeID).
			WithField("error", req.Error).Debug("holder reported failure")
	}
	l.release(ctx, sh, r, t, req.Success, "unlock", now)
	return api.UnlockResponse{Released: true}, nil
}

// Keepalive handles POST /lock/keepalive: it renews the holder's lease.
func (l *Coordinator) Keepalive(ctx context.Context, req api.KeepaliveRequest) (api.KeepaliveResponse, error) {
	t, err := validateKey(req.Type, req.ResourceID)
	if err == nil {
		err = validateID("lease_id", req.LeaseID)
	}
	if err != nil {
		return api.KeepaliveResponse{}, err
	}
	sh := l.shardFor(req.ResourceID)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	r := sh.resources[req.ResourceID]
	if r == nil || r.keys[t].holder == nil || r.keys[t].holder.leaseID != req.LeaseID {
		return api.KeepaliveResponse{}, fmt.Errorf("%s:%s: lease %s is not held: %w", req.Type, req.ResourceID, req.LeaseID, api.ErrNotHolder)
	}
	if err := ownedBy(r.keys[t].holder, req.NodeID); err != nil {
		return api.KeepaliveResponse{}, err
	}
	now := l.now()
	if t == idxDelete {
		// A delete is still granted only while every member is synced: a
		// deleter checks its lease right before it removes the file.
		if err := l.checkSynced(req.ResourceID, now); err != nil {
			defer sh.tidy(r)
			l.release(context.WithoutCancel(ctx), sh, r, t, false, "unsynced", now)
			return api.KeepaliveResponse{}, err
		}
	}
	g := r.keys[t].holder
	if err := l.reapHoldOver(req.ResourceID, g, now); err != nil {
		defer sh.tidy(r)
		l.release(context.WithoutCancel(ctx), sh, r, t, false, "held too long", now)
		return api.KeepaliveResponse{}, err
	}
	g.expires = now.Add(l.cfg.LeaseTTL)
	g.claimed = true
	l.noteReaper(req.ResourceID, g)
	return api.KeepaliveResponse{LeaseTTLMs: l.cfg.LeaseTTL.Milliseconds()}, nil
}

// Cancel handles POST /lock/cancel: the request leaves its queue, or gives
// back the grant it received (as a failure, so the queue advances).
// Cancelling an unknown request is not an error.
func (l *Coordinator) Cancel(ctx context.Context, req api.CancelRequest) error {
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
	sh := l.shardFor(req.ResourceID)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	r := sh.resources[req.ResourceID]
	if r == nil {
		return nil
	}
	defer sh.tidy(r)
	k := &r.keys[t]
	if w := k.queue.Get(req.NodeID, req.RequestID); w != nil {
		l.dropWaiter(k, w)
		return nil
	}
	if k.holder != nil && k.holder.is(req.NodeID, req.RequestID) {
		l.release(ctx, sh, r, t, false, "cancelled", l.now())
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
func (l *Coordinator) grant(r *resource, req request, now time.Time) (*grant, error) {
	fence, err := l.fences.next()
	if err := l.wrote(context.Background(), err); err != nil {
		return nil, fmt.Errorf("%s: %w", typeNames[req.typ], err)
	}
	g := &grant{
		request:  req,
		leaseID:  newID(),
		fence:    fence,
		acquired: now,
		expires:  now.Add(l.cfg.LeaseTTL),
		claimBy:  now.Add(l.cfg.ClaimTimeout),
	}
	switch req.typ {
	case idxDelete:
		if err := l.markDelete(context.Background(), r.id, g); err != nil {
			return nil, fmt.Errorf("%s: %w", typeNames[req.typ], err)
		}
	case idxPull:
		if err := l.recordLease(context.Background(), r.id, g); err != nil {
			return nil, fmt.Errorf("%s: %w", typeNames[req.typ], err)
		}
	}
	r.keys[req.typ].holder = g
	l.noteReaper(r.id, g)
	if l.trace != nil {
		l.trace("granted", req.typ, r.id, req.requestID)
	}
	return g, nil
}

func (l *Coordinator) grantResponse(g *grant) api.LockResponse {
	return api.LockResponse{
		RequestID:  g.requestID,
		Acquired:   true,
		LeaseID:    g.leaseID,
		Fence:      g.fence,
		LeaseTTLMs: l.cfg.LeaseTTL.Milliseconds(),
	}
}

// release ends the holder of r.keys[t] and advances the resource's queues.
// The reference set has already been updated for a success.
func (l *Coordinator) release(ctx context.Context, sh *shard, r *resource, t typeIndex, success bool, reason string, now time.Time) {
	k := &r.keys[t]
	g := k.holder
	k.holder = nil
	l.forgetReaper(r.id, g, now)
	if key, ok := leaseKeyOf(g.leaseID); ok {
		sh.released[key] = released{success: success, typ: t, resource: hashID(r.id), node: hashID(g.nodeID), at: now.UnixNano()}
	}
	l.metrics.hold[t].Observe(now.Sub(g.acquired).Seconds())
	if t == idxDelete && !success {
		l.endDelete(ctx, r, g, reason, now)
	}
	if g.recorded && (!success || t != idxPull) {
		// A successful pull dropped its record with its reference.
		l.dropLease(ctx, r.id, g)
	}
	switch reason {
	case "expired", "unclaimed":
		l.metrics.expiries.WithLabelValues(string(typeNames[t]), reason).Inc()
		log.G(ctx).WithField("key", string(typeNames[t])+":"+r.id).WithField("node", g.nodeID).
			WithField("reason", reason).Info("lock released without the holder")
	}

	if success && t != idxUpdate {
		l.notifyWatchers(r, t, api.EventCompleted, g.nodeID, true, reason)
	} else {
		l.notifyWatchers(r, t, api.EventReleased, g.nodeID, success, reason)
	}
	l.advance(ctx, r, now)
}

// complete records that the holder g of r.keys[t] (a pull or a delete)
// succeeded: everyone waiting on the key skips, and so do newcomers for
// CompletedTTL. Unlock calls it once the reference set is written: an
// unlock whose write fails must change nothing (issue 17), so no waiter may
// have been told to skip.
func (l *Coordinator) complete(r *resource, t typeIndex, g *grant, now time.Time) {
	k := &r.keys[t]
	k.completed = &completion{nodeID: g.nodeID, at: now, fence: g.fence}
	if t == idxPull {
		r.keys[idxDelete].completed = nil
	} else {
		r.keys[idxPull].completed = nil
	}
	k.queue.Each(func(w *waiter) bool {
		if l.trace != nil {
			l.trace("skipped", t, r.id, w.requestID)
		}
		l.tell(w, l.event(r, t, api.EventCompleted, w.nodeID, w.requestID, true, ""))
		l.metrics.result(t, resultSkipped)
		l.metrics.wait[t].Observe(now.Sub(w.queued).Seconds())
		l.metrics.queueDepth[t].Dec()
		l.waiting.done(w.nodeID)
		return true
	})
	k.queue.Clear()
}

// advance grants the head of every queue of r that is free and compatible
// with the current holders, earliest-queued first, until none is.
func (l *Coordinator) advance(ctx context.Context, r *resource, now time.Time) {
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
		l.dropWaiter(k, w)
		l.metrics.wait[next].Observe(now.Sub(w.queued).Seconds())
		if err := l.checkGrantRefs(ctx, r.id, w.request); err != nil {
			// The resource gained references while the delete (or update)
			// waited: refuse it now instead of breaking them.
			l.metrics.result(next, resultInUse)
			if l.trace != nil {
				l.trace("refused", next, r.id, w.requestID)
			}
			ev := l.event(r, next, api.EventError, w.nodeID, w.requestID, false, "")
			body := api.ErrorBody(err)
			ev.Error = &body
			l.tell(w, ev)
			continue
		}
		g, err := l.grant(r, w.request, now)
		if err != nil {
			ev := l.event(r, next, api.EventError, w.nodeID, w.requestID, false, "")
			body := api.ErrorBody(err)
			ev.Error = &body
			l.tell(w, ev)
			continue
		}
		l.metrics.handoffs[next].Inc()
		if l.listens(w) {
			ev := l.event(r, next, api.EventGranted, w.nodeID, w.requestID, true, "")
			lease := l.grantResponse(g)
			ev.Lease = &lease
			l.tell(w, ev) // from now on keepalives keep the lease
		}
		l.notifyWatchers(r, next, api.EventGranted, g.nodeID, true, "")
	}
}

// checkDelete applies the delete rule (docs/design.md §8.7) to a new delete request:
// the reaper's conditions if the reaper asks (reap.go), else the
// checkDeleteUnlock checks a delete's unlock(success), which follows the
// holder's rename of the file: its lease has not expired, and the delete
// rule (checkDeleteRule) still holds. A holder frozen after its last check
// (a paused VM) may rename the file long after it; by then a member may
// have been cut off and failed open (docs/design.md §8.8), using the blob
// unregistered: that member is unsynced, or synced with its reference,
// so the unlock is refused and the holder puts the blob back
// (docs/design.md §8.11). A refusal says why, as a release reason.
// Callers hold the resource's shard mutex.
func (l *Coordinator) checkDeleteUnlock(ctx context.Context, id string, g *grant, now time.Time) (reason string, err error) {
	if !now.Before(g.expires) {
		return "expired", fmt.Errorf("delete:%s: lease %s expired %s ago: %w", id, g.leaseID, now.Sub(g.expires).Round(time.Millisecond), api.ErrNotHolder)
	}
	own := "" // a dangling reap's own reference, which it drops
	if g.reap == api.ReapDangling {
		own = g.nodeID
	}
	return "refused", l.checkDeleteRule(ctx, id, g.reap, own, now)
}

// checkDelete applies the delete rule (docs/design.md §8.7) to a new delete request:
// the reaper's conditions if the reaper asks (reap.go), else the
// requester's own reference goes; then no node may reference the
// resource (but a dangling reap's own reference, which it drops) and
// every member must be synced.
func (l *Coordinator) checkDelete(ctx context.Context, req api.LockRequest, now time.Time) error {
	own, err := l.reapRule(req.ResourceID, req.NodeID, req.Reap, now)
	if err != nil {
		return err
	}
	if err := l.checkClash(req.ResourceID, req.NodeID, now); err != nil {
		return err
	}
	if req.Reap == "" {
		// The requesting node's GC no longer uses the resource.
		l.noteRef(req.NodeID, req.ResourceID, false)
		failpoint.Inject(failpoint.CoordDeleteBeforeRefs)
		_, err := l.refs.RemoveRef(ctx, req.ResourceID, req.NodeID)
		if err := l.wrote(ctx, err); err != nil {
			return fmt.Errorf("%s:%s: %w", req.Type, req.ResourceID, err)
		}
		failpoint.Inject(failpoint.CoordDeleteAfterRefs)
		l.noteActivity(l.shardFor(req.ResourceID), req.ResourceID, now)
	}
	return l.checkDeleteRule(ctx, req.ResourceID, req.Reap, own, now)
}

// checkGrantRefs re-checks, when a queued delete or update reaches the
// head, the rules that were checked when it queued (a queued delete's
// own reference went then).
func (l *Coordinator) checkGrantRefs(ctx context.Context, id string, req request) error {
	switch {
	case req.typ == idxDelete:
		now := l.now()
		own, err := l.reapRule(id, req.nodeID, req.reap, now)
		if err != nil {
			return err
		}
		return l.checkDeleteRule(ctx, id, req.reap, own, now)
	case req.typ == idxUpdate && l.cfg.UpdateRequiresNoRef:
		return l.checkNoOtherRefs(ctx, id, req.nodeID)
	}
	return nil
}

func (l *Coordinator) checkNoOtherRefs(ctx context.Context, id, node string) error {
	rc, err := l.refsWithPending(ctx, id)
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

func (l *Coordinator) lockedError(r *resource, t typeIndex) error {
	for held := range numTypes {
		if g := r.keys[held].holder; g != nil && (held == t || !compatible[held][t]) {
			return fmt.Errorf("%s:%s: held by %s:%s of node %s for %s: %w", typeNames[t], r.id,
				typeNames[held], r.id, g.nodeID, l.now().Sub(g.acquired).Round(time.Millisecond), api.ErrLocked)
		}
	}
	return fmt.Errorf("%s:%s: %d request(s) queued ahead: %w", typeNames[t], r.id, r.keys[t].queue.Len(), api.ErrLocked)
}

// dropWaiter removes w from k's queue.
func (l *Coordinator) dropWaiter(k *key, w *waiter) {
	k.queue.Remove(w)
	l.metrics.queueDepth[w.typ].Dec()
	l.waiting.done(w.nodeID)
}

// newID returns an unguessable identifier (128 random bits).
func newID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
