package lockserver

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/sharedcontent/sharedcontent/lockserver/api"
)

// The reaper's lock (docs/design.md §8.12) is the update lock of
// api.ReapLockResource: only a designated reaper takes it, one hold lasts
// at most MaxReapHold (its lease ends there, a keepalive past it is
// refused, and the node may not take it again for as long), and the
// locks part keeps a record of its holder that the reap rules (reap.go)
// and an expiry (expire.go) ask for.
//
// reapLock is the locks part's record of the reaper's lock. Lock order:
// the holder's record is an atomic pointer, written under the reap lock's
// shard mutex and read under any shard's; cut is kept under the reap
// lock's shard mutex.
type reapLock struct {
	cfg     Config
	metrics *metrics
	// holder is the grant of the reaper's lock, nil when none.
	holder atomic.Pointer[reapHolder]
	// cut: node → when its hold of the reaper's lock reached the bound.
	cut map[string]time.Time
}

// reapHolder is the grant of the reaper's lock.
type reapHolder struct {
	node    string
	leaseID string
	expires time.Time
}

// note records g as the reaper's grant if it is the reap lock's,
// and ends its lease at the bound of one hold at the latest.
// Callers hold the shard mutex of api.ReapLockResource.
func (rl *reapLock) note(resourceID string, g *grant) {
	if g.typ == idxUpdate && resourceID == api.ReapLockResource {
		g.expires = minTime(g.expires, g.acquired.Add(rl.cfg.maxReapHold()))
		rl.holder.Store(&reapHolder{node: g.nodeID, leaseID: g.leaseID, expires: g.expires})
	}
}

// forget clears the reaper's record when its grant g ends at now;
// a hold that reached the bound keeps its node from the lock for as long.
// Callers hold the shard mutex of api.ReapLockResource.
func (rl *reapLock) forget(resourceID string, g *grant, now time.Time) {
	if g.typ != idxUpdate || resourceID != api.ReapLockResource {
		return
	}
	if h := rl.holder.Load(); h != nil && h.leaseID == g.leaseID {
		rl.holder.Store(nil)
	}
	if !now.Before(g.acquired.Add(rl.cfg.maxReapHold())) {
		if rl.cut == nil {
			rl.cut = map[string]time.Time{}
		}
		rl.cut[g.nodeID] = now
		rl.metrics.reapHoldsCut.Inc()
	}
}

// holdOver refuses a keepalive of the reap lock's grant g past the
// bound of one hold. Callers hold the reap lock's shard mutex.
func (rl *reapLock) holdOver(resourceID string, g *grant, now time.Time) error {
	if g.typ != idxUpdate || resourceID != api.ReapLockResource {
		return nil
	}
	if held, bound := now.Sub(g.acquired), rl.cfg.maxReapHold(); held >= bound {
		return fmt.Errorf("%s:%s: node %s has held the reaper's lock for %s, the bound of one hold (--reap-max-hold %s): taken away: %w",
			api.OperationUpdate, resourceID, g.nodeID, held.Round(time.Millisecond), bound, api.ErrNotHolder)
	}
	return nil
}

// may checks that node may take the reaper's lock: it is a designated
// reaper (or the caller an admin), and its last hold did not reach the
// bound within one bound of now. Callers hold the reap lock's shard mutex.
func (rl *reapLock) may(ctx context.Context, node string, now time.Time) error {
	lock := string(api.OperationUpdate) + ":" + api.ReapLockResource
	if !IsAdmin(ctx) {
		switch {
		case len(rl.cfg.Reapers) > 0 && !slices.Contains(rl.cfg.Reapers, node):
			return fmt.Errorf("%s: node %s is not a designated reaper (--reapers %s); only those take the reaper's lock, reap and expire members: %w",
				lock, node, strings.Join(rl.cfg.Reapers, ","), api.ErrForbidden)
		case len(rl.cfg.Reapers) == 0 && rl.cfg.ReapersRequired:
			return fmt.Errorf("%s: node %s is not a designated reaper: no node is (--reapers is empty and nodes have their own identities), so nothing is reaped: %w",
				lock, node, api.ErrForbidden)
		}
	}
	bound := rl.cfg.maxReapHold()
	if at, ok := rl.cut[node]; ok {
		if now.Sub(at) < bound {
			return fmt.Errorf("%s: node %s held the reaper's lock for the bound of one hold (--reap-max-hold %s) until %s ago; it may take it again %s after that: %w",
				lock, node, bound, now.Sub(at).Round(time.Millisecond), bound, api.ErrForbidden)
		}
		delete(rl.cut, node)
	}
	return nil
}

// reaper returns the record of the reaper's lock's holder, nil when
// nobody holds it (resourceLocks).
func (lk *locks) reaper() *reapHolder { return lk.reap.holder.Load() }

// holdReaper holds the reap lock's shard, so that its lease stays live
// while the caller acts on it (an expiry, until the member is forgotten;
// lock order: shard, then mmu), and fails with ErrForbidden unless req
// names the live lease of the reap lock's holder. On success the caller
// calls release.
func (lk *locks) holdReaper(req api.ExpireRequest, now time.Time) (release func(), err error) {
	sh := lk.shardFor(api.ReapLockResource)
	sh.mu.Lock()
	var g *grant
	if r := sh.resources[api.ReapLockResource]; r != nil {
		g = r.keys[idxUpdate].holder
	}
	if g == nil || g.leaseID != req.LeaseID || g.nodeID != req.NodeID || !now.Before(g.expires) {
		sh.mu.Unlock()
		return nil, fmt.Errorf("only the reaper expires members: node %q does not hold the %s lock of %s with that lease: %w",
			req.NodeID, api.OperationUpdate, api.ReapLockResource, api.ErrForbidden)
	}
	return sh.mu.Unlock, nil
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}
