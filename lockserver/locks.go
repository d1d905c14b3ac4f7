package lockserver

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// locks is the coordinator's locks part (docs/design.md §3): the shards
// of resources with their holders, queues and retained completions, the
// leases and their fences, the watchers and node streams that carry the
// outcomes, the per-node bound on waiters and the sweepers. A lock
// request's walk stays inside it; it asks the references part
// (references.go) for the rules on references a grant obeys and for the
// reference writes of a successful unlock.
//
// Every operation on one resource runs under that resource's shard
// mutex, so the cross-type rules and the reference checks are atomic;
// different shards never contend.
type locks struct {
	cfg     Config
	now     func() time.Time
	metrics *metrics
	store   *store
	// refs is the references part: the delete rule, the reap rules, the
	// reference writes of an unlock and the resources' activity.
	refs    referenceRules
	shards  []*shard
	fences  *fenceSource
	waiting *nodeCounter // each node's queued requests (bounds.go)
	streams *nodeStreams // the open node streams (nodestream.go)
	// trace, when set (by tests), is called under the shard mutex at every
	// enqueue and grant.
	trace func(event string, t typeIndex, resourceID, requestID string)
	// closing is set when Close begins: unlocks are refused from then
	// on, so the update leases Close records for the next coordinator
	// are exactly those still held (leases.go).
	closing atomic.Bool
	stop    <-chan struct{} // closed by Coordinator.Close; stops the sweepers
	reap    *reapLock       // the reaper's lock (reaplock.go)
}

// shard owns the resources whose resource_id hashes to it.
type shard struct {
	mu        sync.Mutex
	resources map[string]*resource  // protected by mu
	released  map[leaseKey]released // lease id → outcome; protected by mu
	cancelled map[cancelKey]int64   // cancels that came before their request (cancelled.go); protected by mu
	// free holds forgotten resources for reuse: a lock on an idle key
	// (the common case) would otherwise allocate one per acquire.
	free  []*resource // protected by mu
	peaks mapPeaks    // protected by mu; for shrink (sweep.go)
}

// maxFreeResources bounds a shard's free list.
const maxFreeResources = 64

// newLocks returns the locks part with empty shards; the fences continue
// from the store's high-water mark.
func newLocks(ctx context.Context, cfg Config, st *store, refs referenceRules, now func() time.Time, stop <-chan struct{}) (*locks, error) {
	lk := &locks{
		cfg:     cfg,
		now:     now,
		metrics: st.metrics,
		store:   st,
		refs:    refs,
		shards:  make([]*shard, cfg.Shards),
		waiting: newNodeCounter(cfg.MaxWaitersPerNode),
		streams: newNodeStreams(cfg.LeaseTTL, now),
		stop:    stop,
		reap:    &reapLock{cfg: cfg, metrics: st.metrics},
	}
	for i := range lk.shards {
		lk.shards[i] = &shard{resources: make(map[string]*resource), released: make(map[leaseKey]released)}
	}
	var err error
	if lk.fences, err = newFenceSource(ctx, st, DefaultFenceBlock); err != nil {
		return nil, err
	}
	return lk, nil
}

// start adopts the recorded leases, retains the deletes remembered and
// starts one sweeper per shard, counted in wg.
func (lk *locks) start(ctx context.Context, wg *sync.WaitGroup) error {
	if err := lk.loadDeletes(ctx); err != nil {
		return err
	}
	if err := lk.adoptLeases(ctx); err != nil {
		return fmt.Errorf("lockserver: adopting the recorded leases: %w", err)
	}
	for i, sh := range lk.shards {
		wg.Add(1)
		go lk.sweepLoop(wg, i, sh)
	}
	return nil
}

// close ends every event subscription and node stream, once the sweepers
// have stopped. Unlocks are refused from beginClose on.
func (lk *locks) close() {
	for _, sh := range lk.shards {
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
	lk.streams.closeAll()
}

func (lk *locks) shardFor(resourceID string) *shard {
	return lk.shards[shardIndex(resourceID, len(lk.shards))]
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

// held is one resource held still for the references part
// (heldResource): its shard mutex is held until release.
type held struct {
	sh *shard
	id string
}

// hold takes resourceID's shard mutex (resourceLocks).
func (lk *locks) hold(resourceID string) heldResource {
	sh := lk.shardFor(resourceID)
	sh.mu.Lock()
	return &held{sh: sh, id: resourceID}
}

// deleting returns the node whose delete of the resource is in flight.
func (h *held) deleting() (node string, ok bool) {
	if r := h.sh.resources[h.id]; r != nil {
		if g := r.keys[idxDelete].holder; g != nil {
			return g.nodeID, true
		}
	}
	return "", false
}

// deleted returns the resource's retained delete completion, or nil.
func (h *held) deleted() *completion {
	if r := h.sh.resources[h.id]; r != nil {
		return r.keys[idxDelete].completed
	}
	return nil
}

// endDeleted forgets the retained delete completion: the resource is in
// use again, so a later delete must really run.
func (h *held) endDeleted() {
	if r := h.sh.resources[h.id]; r != nil {
		r.keys[idxDelete].completed = nil
		h.sh.tidy(r)
	}
}

// release lets the resource go.
func (h *held) release() { h.sh.mu.Unlock() }
