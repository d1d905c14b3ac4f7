package lockserver

import (
	"context"
	"time"
)

// sweepLoop is the one goroutine per shard that expires leases, releases
// unclaimed grants, drops abandoned stream-less waiters and forgets old
// completions. It stops when the Locker closes.
func (l *Locker) sweepLoop(sh *shard) {
	defer l.wg.Done()
	t := time.NewTicker(l.cfg.sweepInterval())
	defer t.Stop()
	for {
		select {
		case <-l.stop:
			return
		case <-t.C:
			l.sweep(sh, l.now())
		}
	}
}

func (l *Locker) sweep(sh *shard, now time.Time) {
	ctx := context.Background()
	sh.mu.Lock()
	defer sh.mu.Unlock()
	for _, r := range sh.resources {
		changed := false
		for t := range numTypes {
			k := &r.keys[t]
			if g := k.holder; g != nil {
				switch {
				case !g.claimed && now.After(g.claimBy):
					l.release(ctx, sh, r, t, false, "unclaimed", now)
				case now.After(g.expires):
					l.release(ctx, sh, r, t, false, "expired", now)
				}
			}
			// A waiter without a stream that stopped polling is gone.
			var gone []*waiter
			k.queue.Each(func(w *waiter) bool {
				if w.sub == nil && now.Sub(w.lastSeen) > l.cfg.LeaseTTL {
					gone = append(gone, w)
				}
				return true
			})
			for _, w := range gone {
				l.dropWaiter(k, w)
				changed = true
			}
			if c := k.completed; c != nil && now.Sub(c.at) >= l.cfg.CompletedTTL {
				k.completed = nil
			}
		}
		if changed {
			l.advance(ctx, r, now)
		}
		sh.tidy(r)
	}
	forgetBefore := now.Add(-l.cfg.LeaseTTL).UnixNano()
	for lease, rel := range sh.released {
		if rel.at < forgetBefore {
			delete(sh.released, lease)
		}
	}
}
