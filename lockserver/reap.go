package lockserver

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/sharedcontent/sharedcontent/lockserver/api"
)

// The reaper's deletes (docs/design.md §8.12). One node's view of the
// shared root is evidence about that node only, so the coordinator checks
// the reaper's conditions itself rather than trusting the caller:
//   - only a designated reaper (Config.Reapers, or an admin caller) may
//     take the reaper's lock (the update lock of api.ReapLockResource):
//     403 forbidden otherwise;
//   - one hold of it lasts at most MaxReapHold: its lease ends there,
//     a keepalive past it is refused, and the node may not take it again
//     for as long, so that a holder that keeps it alive cannot stop
//     reaping;
//   - a reap delete is granted only to the node holding the reaper's lock
//     with a lease that has not expired: 403 forbidden otherwise;
//   - once it has been up ReapGrace (before that it cannot know what
//     happened to the resource), and outside ReapGrace of the resource's
//     last pull completion or reference change it saw (refs/add, a
//     node's own delete dropping its reference, a delete's success):
//     409 in_use otherwise;
//   - a dangling reap drops the reaper's own reference only: another
//     node's reference refuses it (409 in_use), whatever the reaper sees,
//     and goes only with that node (its own delete, expiry, forget).
// An in-flight pull excludes the delete through the compatibility matrix.
// Times are uptimes on the coordinator's monotonic clock. A full sync's
// replacement of a node's references, and forgetting a node, are not
// counted as changes: what a sync adds makes the resource referenced
// (a reap is refused by the count), and what it removes, or what
// forgetting drops, no member uses.
//
// Lock order: the reaper's record is an atomic pointer, written under the
// reap lock's shard mutex and read under any shard's; reapCut is kept
// under the reap lock's shard mutex; a resource's activity is kept by its
// shard, under the shard mutex.

// reapHolder is the grant of the reaper's lock.
type reapHolder struct {
	node    string
	leaseID string
	expires time.Time
}

// maxRecentResources bounds the resources whose last activity the
// coordinator remembers, over all shards. A shard over its share forgets
// them all and counts every one of its resources as active now: reaps in
// that shard wait a grace, nothing is reaped early.
const maxRecentResources = 1 << 18

// noteReaper records g as the reaper's grant if it is the reap lock's,
// and ends its lease at the bound of one hold at the latest.
// Callers hold the shard mutex of api.ReapLockResource.
func (l *Coordinator) noteReaper(resourceID string, g *grant) {
	if g.typ == idxUpdate && resourceID == api.ReapLockResource {
		g.expires = minTime(g.expires, g.acquired.Add(l.cfg.maxReapHold()))
		l.reaper.Store(&reapHolder{node: g.nodeID, leaseID: g.leaseID, expires: g.expires})
	}
}

// forgetReaper clears the reaper's record when its grant g ends at now;
// a hold that reached the bound keeps its node from the lock for as long.
// Callers hold the shard mutex of api.ReapLockResource.
func (l *Coordinator) forgetReaper(resourceID string, g *grant, now time.Time) {
	if g.typ != idxUpdate || resourceID != api.ReapLockResource {
		return
	}
	if h := l.reaper.Load(); h != nil && h.leaseID == g.leaseID {
		l.reaper.Store(nil)
	}
	if !now.Before(g.acquired.Add(l.cfg.maxReapHold())) {
		if l.reapCut == nil {
			l.reapCut = map[string]time.Time{}
		}
		l.reapCut[g.nodeID] = now
		l.metrics.reapHoldsCut.Inc()
	}
}

// reapHoldOver refuses a keepalive of the reap lock's grant g past the
// bound of one hold. Callers hold the reap lock's shard mutex.
func (l *Coordinator) reapHoldOver(resourceID string, g *grant, now time.Time) error {
	if g.typ != idxUpdate || resourceID != api.ReapLockResource {
		return nil
	}
	if held, bound := now.Sub(g.acquired), l.cfg.maxReapHold(); held >= bound {
		return fmt.Errorf("%s:%s: node %s has held the reaper's lock for %s, the bound of one hold (--reap-max-hold %s): taken away: %w",
			api.OperationUpdate, resourceID, g.nodeID, held.Round(time.Millisecond), bound, api.ErrNotHolder)
	}
	return nil
}

// mayReap checks that node may take the reaper's lock: it is a designated
// reaper (or the caller an admin), and its last hold did not reach the
// bound within one bound of now. Callers hold the reap lock's shard mutex.
func (l *Coordinator) mayReap(ctx context.Context, node string, now time.Time) error {
	lock := string(api.OperationUpdate) + ":" + api.ReapLockResource
	if !IsAdmin(ctx) {
		switch {
		case len(l.cfg.Reapers) > 0 && !slices.Contains(l.cfg.Reapers, node):
			return fmt.Errorf("%s: node %s is not a designated reaper (--reapers %s); only those take the reaper's lock, reap and expire members: %w",
				lock, node, strings.Join(l.cfg.Reapers, ","), api.ErrForbidden)
		case len(l.cfg.Reapers) == 0 && l.cfg.ReapersRequired:
			return fmt.Errorf("%s: node %s is not a designated reaper: no node is (--reapers is empty and nodes have their own identities), so nothing is reaped: %w",
				lock, node, api.ErrForbidden)
		}
	}
	bound := l.cfg.maxReapHold()
	if at, ok := l.reapCut[node]; ok {
		if now.Sub(at) < bound {
			return fmt.Errorf("%s: node %s held the reaper's lock for the bound of one hold (--reap-max-hold %s) until %s ago; it may take it again %s after that: %w",
				lock, node, bound, now.Sub(at).Round(time.Millisecond), bound, api.ErrForbidden)
		}
		delete(l.reapCut, node)
	}
	return nil
}

// reapRule checks a delete's reap mode m: none is a node's own delete;
// a known mode must meet the reaper's conditions (checkReap). It returns
// the node whose reference does not refuse the delete: none for a node's
// own delete (its reference went already) and for an orphan reap; the
// reaper's own for a dangling reap, which drops that reference only
// (every other node's refuses it). An unknown mode is an error, never a
// permissive branch (validateReap refuses it earlier).
func (l *Coordinator) reapRule(id, node string, m api.ReapMode, now time.Time) (own string, err error) {
	switch m {
	case "":
		return "", nil
	case api.ReapOrphan:
		return "", l.checkReap(id, node, now)
	case api.ReapDangling:
		return node, l.checkReap(id, node, now)
	}
	return "", errUnknownReap(id, m)
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// checkReap applies the reaper's conditions to a reap delete of id sent
// by node. Callers hold id's shard mutex.
func (l *Coordinator) checkReap(id, node string, now time.Time) error {
	h := l.reaper.Load()
	switch {
	case h == nil:
		return fmt.Errorf("delete:%s: a reap delete may come only from the node holding the reaper's lock (update:%s), and nobody holds it: %w",
			id, api.ReapLockResource, api.ErrForbidden)
	case h.node != node:
		return fmt.Errorf("delete:%s: a reap delete may come only from the node holding the reaper's lock (update:%s), held by node %s, not %s: %w",
			id, api.ReapLockResource, h.node, node, api.ErrForbidden)
	case !now.Before(h.expires):
		return fmt.Errorf("delete:%s: node %s's lease of the reaper's lock (update:%s) expired %s ago: %w",
			id, node, api.ReapLockResource, now.Sub(h.expires).Round(time.Millisecond), api.ErrForbidden)
	}
	grace := l.cfg.ReapGrace
	if grace == 0 {
		return nil
	}
	up := now.Sub(l.started)
	if up < grace {
		return fmt.Errorf("delete:%s: reap refused: the coordinator has been up %s, less than its reap grace %s, and cannot know what happened to the resource before it started: %w",
			id, up.Round(time.Millisecond), grace, api.ErrInUse)
	}
	if ago := up - l.shardFor(id).lastActivity(id); ago < grace {
		return fmt.Errorf("delete:%s: reap refused: pulled, or its references changed, %s ago, within the coordinator's reap grace %s: %w",
			id, ago.Round(time.Millisecond), grace, api.ErrInUse)
	}
	return nil
}

// noteActivity records that id was pulled or its references changed.
// Callers hold sh.mu (sh is id's shard).
func (l *Coordinator) noteActivity(sh *shard, id string, now time.Time) {
	if l.cfg.ReapGrace == 0 {
		return
	}
	up := now.Sub(l.started)
	if _, ok := sh.recent[id]; !ok && len(sh.recent) >= max(1024, maxRecentResources/len(l.shards)) {
		sh.recent, sh.recentFloor = nil, up
		return
	}
	if sh.recent == nil {
		sh.recent = map[string]time.Duration{}
	}
	sh.recent[id] = up
}

// lastActivity is the uptime of id's last recorded activity (the floor
// of its shard when none is). Callers hold sh.mu.
func (sh *shard) lastActivity(id string) time.Duration {
	return max(sh.recent[id], sh.recentFloor)
}

// pruneRecent forgets the activity older than the grace, at most every
// quarter grace. The sweep calls it with sh.mu held; it rebuilds the map,
// so memory goes back as entries go.
func (l *Coordinator) pruneRecent(sh *shard, now time.Time) {
	grace := l.cfg.ReapGrace
	up := now.Sub(l.started)
	if len(sh.recent) == 0 || up-sh.prunedAt < grace/4 {
		return
	}
	sh.prunedAt = up
	var kept map[string]time.Duration
	for id, at := range sh.recent {
		if up-at < grace {
			if kept == nil {
				kept = map[string]time.Duration{}
			}
			kept[id] = at
		}
	}
	sh.recent = kept
}
