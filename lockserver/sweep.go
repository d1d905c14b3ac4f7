package lockserver

import (
	"context"
	"sync"
	"time"
)

// sweepLoop is the one goroutine per shard that expires leases, releases
// unclaimed grants, drops abandoned stream-less waiters and forgets old
// completions. It stops when the Coordinator closes.
func (lk *locks) sweepLoop(wg *sync.WaitGroup, i int, sh *shard) {
	defer wg.Done()
	t := time.NewTicker(lk.cfg.sweepInterval())
	defer t.Stop()
	for {
		select {
		case <-lk.stop:
			return
		case <-t.C:
			lk.sweep(i, lk.now())
		}
	}
}

func (lk *locks) sweep(i int, now time.Time) {
	ctx := context.Background()
	sh := lk.shards[i]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	var pruned []string // delete completions whose retention ended
	for _, r := range sh.resources {
		changed := false
		for t := range numTypes {
			k := &r.keys[t]
			if g := k.holder; g != nil {
				switch {
				case !g.claimed && now.After(g.claimBy):
					lk.release(ctx, sh, r, t, false, "unclaimed", now)
				case now.After(g.expires):
					// A pull's holder may have committed the blob without
					// reaching the coordinator: its reference first.
					if t != idxPull || lk.refs.keepHolderRef(ctx, r.id, g, now) {
						lk.release(ctx, sh, r, t, false, "expired", now)
					}
				}
			}
			// A waiter without a stream that stopped polling is gone,
			// unless its node's stream carries it (nodestream.go).
			var gone []*waiter
			k.queue.Each(func(w *waiter) bool {
				if w.sub == nil && now.Sub(w.lastSeen) > lk.cfg.LeaseTTL && !lk.streams.keeps(w.nodeID, now) {
					gone = append(gone, w)
				}
				return true
			})
			for _, w := range gone {
				lk.dropWaiter(k, w)
				changed = true
			}
			if c := k.completed; c != nil && now.Sub(c.at) >= lk.cfg.CompletedTTL {
				k.completed = nil
				if t == idxDelete {
					pruned = append(pruned, r.id)
				}
			}
		}
		if changed {
			lk.advance(ctx, r, now)
		}
		sh.tidy(r)
	}
	pruneDeleted(ctx, lk.store, pruned)
	forgetBefore := now.Add(-lk.cfg.LeaseTTL).UnixNano()
	for lease, rel := range sh.released {
		if rel.at < forgetBefore {
			delete(sh.released, lease)
		}
	}
	sh.forgetCancelled(forgetBefore)
	lk.refs.pruneRecent(i, now)
	sh.shrink()
}

// Go maps never give memory back: a map keeps the buckets of its largest
// size after its entries are deleted. A shard that once held 200k idle
// keys or released leases (docs/design.md §10.3) would keep
// them, and the sweep would scan their empty buckets, for the life of the
// process. So the sweep rebuilds a shard's map once its length has fallen
// to 1/shrinkFactor of its peak.
const (
	shrinkFactor = 4
	// minShrinkPeak is the peak below which a map is left alone: its
	// buckets cost a few tens of KiB at most, and rebuilding it would be
	// churn.
	minShrinkPeak = 1024
)

// mapPeaks are the largest lengths of a shard's maps since each was last
// rebuilt. resources is updated at every insert (shard.resource), since
// a resource can come and go between two sweeps; released is sampled by
// the sweep, since a released lease stays at least a lease TTL, four
// sweeps or more.
type mapPeaks struct {
	resources int
	released  int
}

// shrink rebuilds the shard's maps that have emptied well below their
// peak. Called by the sweep with sh.mu held. A rebuild copies len(m) <=
// peak/shrinkFactor entries, after at least peak-len(m) deletions since
// the map was at its peak (and after the previous rebuild): O(1)
// amortised per deletion.
func (sh *shard) shrink() {
	sh.peaks.released = max(sh.peaks.released, len(sh.released))
	if shrinkable(len(sh.released), sh.peaks.released) {
		sh.released = rebuilt(sh.released)
		sh.peaks.released = len(sh.released)
	}
	if shrinkable(len(sh.resources), sh.peaks.resources) {
		sh.resources = rebuilt(sh.resources)
		sh.peaks.resources = len(sh.resources)
	}
}

func shrinkable(n, peak int) bool {
	return peak >= minShrinkPeak && n <= peak/shrinkFactor
}

// rebuilt returns a copy of m sized for its current length (maps.Clone
// would keep m's buckets: an emptied map of 200k released leases and its
// clone both hold 18 MiB).
func rebuilt[K comparable, V any](m map[K]V) map[K]V {
	out := make(map[K]V, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}
