package lockserver

import (
	"fmt"
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
// The reaper's lock itself (who may take it, how long one hold lasts,
// who holds it now) is the locks part's (reaplock.go); the rules a reap
// delete meets here ask it who holds it (resourceLocks.reaper). A
// resource's activity is kept by its reference stripe, under the
// stripe's mutex (taken after the shard's).

// maxRecentResources bounds the resources whose last activity the
// coordinator remembers, over all shards. A shard over its share forgets
// them all and counts every one of its resources as active now: reaps in
// that shard wait a grace, nothing is reaped early.
const maxRecentResources = 1 << 18

// reapRule checks a delete's reap mode m: none is a node's own delete;
// a known mode must meet the reaper's conditions (checkReap). It returns
// the node whose reference does not refuse the delete: none for a node's
// own delete (its reference went already) and for an orphan reap; the
// reaper's own for a dangling reap, which drops that reference only
// (every other node's refuses it). An unknown mode is an error, never a
// permissive branch (validateReap refuses it earlier).
func (rs *references) reapRule(id, node string, m api.ReapMode, now time.Time) (own string, err error) {
	switch m {
	case "":
		return "", nil
	case api.ReapOrphan:
		return "", rs.checkReap(id, node, now)
	case api.ReapDangling:
		return node, rs.checkReap(id, node, now)
	}
	return "", errUnknownReap(id, m)
}

// checkReap applies the reaper's conditions to a reap delete of id sent
// by node. Callers hold id's shard mutex.
func (rs *references) checkReap(id, node string, now time.Time) error {
	h := rs.locks.reaper()
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
	grace := rs.cfg.ReapGrace
	if grace == 0 {
		return nil
	}
	up := now.Sub(rs.started)
	if up < grace {
		return fmt.Errorf("delete:%s: reap refused: the coordinator has been up %s, less than its reap grace %s, and cannot know what happened to the resource before it started: %w",
			id, up.Round(time.Millisecond), grace, api.ErrInUse)
	}
	if ago := up - rs.lastActivity(id); ago < grace {
		return fmt.Errorf("delete:%s: reap refused: pulled, or its references changed, %s ago, within the coordinator's reap grace %s: %w",
			id, ago.Round(time.Millisecond), grace, api.ErrInUse)
	}
	return nil
}

// noteActivity records that id was pulled or its references changed.
// Callers hold id's shard mutex.
func (rs *references) noteActivity(id string, now time.Time) {
	if rs.cfg.ReapGrace == 0 {
		return
	}
	up := now.Sub(rs.started)
	st := rs.stripe(id)
	st.mu.Lock()
	defer st.mu.Unlock()
	if _, ok := st.recent[id]; !ok && len(st.recent) >= max(1024, maxRecentResources/len(rs.stripes)) {
		st.recent, st.recentFloor = nil, up
		return
	}
	if st.recent == nil {
		st.recent = map[string]time.Duration{}
	}
	st.recent[id] = up
}

// lastActivity is the uptime of id's last recorded activity (the floor
// of its stripe when none is).
func (rs *references) lastActivity(id string) time.Duration {
	st := rs.stripe(id)
	st.mu.Lock()
	defer st.mu.Unlock()
	return max(st.recent[id], st.recentFloor)
}

// pruneRecent forgets the activity of stripe i older than the grace, at
// most every quarter grace. The sweep of shard i calls it; it rebuilds
// the map, so memory goes back as entries go.
func (rs *references) pruneRecent(i int, now time.Time) {
	grace := rs.cfg.ReapGrace
	up := now.Sub(rs.started)
	st := rs.stripes[i]
	st.mu.Lock()
	defer st.mu.Unlock()
	if len(st.recent) == 0 || up-st.prunedAt < grace/4 {
		return
	}
	st.prunedAt = up
	var kept map[string]time.Duration
	for id, at := range st.recent {
		if up-at < grace {
			if kept == nil {
				kept = map[string]time.Duration{}
			}
			kept[id] = at
		}
	}
	st.recent = kept
}
