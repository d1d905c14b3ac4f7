package lockserver

import (
	"context"
	"fmt"
	"time"

	"github.com/containerd/log"

	"github.com/sharedcontent/sharedcontent/lockserver/api"
)

// Expiry (docs/design.md §8.4). Time
// alone never proves a node dead: one cut off from the coordinator may
// still run and use its blobs. A member is forgotten automatically only
// when both hold for NodeExpiry:
//   - the coordinator has not heard from it, in the coordinator's own
//     uptime (absence, members.go: downtime never counts);
//   - its marker in the shared root has not changed. The coordinator does
//     not see the root; the reaper does, and reports the marker's state
//     (an opaque fingerprint of its content, size and mtime) at every
//     call. The coordinator records the first report of each state and
//     measures, in its own uptime, how long the same reaper has reported
//     the same state: never the caller's figure. A reaper that sees no
//     marker reports none, which proves nothing.
//
// The coordinator runs no expiry of its own: the reaper asks (Expire), and
// the coordinator checks both measures itself before it forgets.

// markerReport is the state of a member's marker as one reaper reported
// it, and since when (the coordinator's uptime) that reaper has reported
// that state. Each reaper's reports are kept apart: one reaper's view
// neither extends nor resets another's.
type markerReport struct {
	state string
	since time.Duration
}

// Expire handles POST /nodes/{id}/expire: it forgets nodeID when the
// caller holds the reap lock (req.NodeID with the live lease req.LeaseID)
// and the member is not live, has been absent for NodeExpiry of this
// coordinator's uptime, and the same reaper has reported its marker in
// the same state (req.Marker) for at least NodeExpiry of it. Every call
// records the report, also one refused. Refusals: ErrForbidden (not the
// reaper), ErrNotFound (no such member), ErrMemberLive, ErrNotExpired
// (either measure too short). A request without a lease is an admin's
// (the HTTP handler lets only an admin send one), whose
// req.MarkerUnchangedMs is taken as it is: an admin may forget a member
// anyway.
func (c *Coordinator) Expire(ctx context.Context, nodeID string, req api.ExpireRequest) (api.ExpireResponse, error) {
	if err := validateID("node_id", nodeID); err != nil {
		return api.ExpireResponse{}, err
	}
	if req.MarkerUnchangedMs < 0 {
		return api.ExpireResponse{}, fmt.Errorf("marker_unchanged_ms %d is negative: %w", req.MarkerUnchangedMs, api.ErrInvalidArgument)
	}
	if len(req.Marker) > api.MaxIDLen {
		return api.ExpireResponse{}, fmt.Errorf("marker is %d bytes, more than %d: %w", len(req.Marker), api.MaxIDLen, api.ErrInvalidArgument)
	}
	now := c.now()
	reaper := req.LeaseID != ""
	if reaper {
		// Hold the reap lock's shard until the member is forgotten, so
		// that the lease is live throughout (lock order: shard, then mmu).
		release, err := c.locks.holdReaper(req, now)
		if err != nil {
			return api.ExpireResponse{}, err
		}
		defer release()
	}
	return c.expire(ctx, nodeID, req, reaper, now)
}

// expire is Expire's members half: it records the reaper's report and
// forgets nodeID if both measures reach the node expiry. A reaper's
// lease was checked, and its shard is held (lock order: shard, then
// mmu).
func (mp *memberPart) expire(ctx context.Context, nodeID string, req api.ExpireRequest, reaper bool, now time.Time) (api.ExpireResponse, error) {
	mp.mmu.Lock()
	defer mp.mmu.Unlock()
	m := mp.members[nodeID]
	if m == nil {
		return api.ExpireResponse{}, fmt.Errorf("expire node %s: not a member: %w", nodeID, api.ErrNotFound)
	}
	if m.live(now) {
		delete(mp.markers, nodeID)
		return api.ExpireResponse{}, fmt.Errorf("expire node %s: it has a live session: %w", nodeID, api.ErrMemberLive)
	}
	resp := api.ExpireResponse{NodeID: nodeID, AbsentMs: mp.absence(m, now).Milliseconds(),
		MarkerUnchangedMs: req.MarkerUnchangedMs, NodeExpiryMs: mp.cfg.NodeExpiry.Milliseconds()}
	if reaper {
		resp.MarkerUnchangedMs = mp.markerReported(nodeID, req.NodeID, req.Marker, now).Milliseconds()
	}
	if err := expiryDue(resp); err != nil {
		if reaper && req.Marker == "" {
			err = fmt.Errorf("%w; the reaper reported no state of its marker (none in its view of the root, or a reaper older than this coordinator): only `sharedcontentctl node forget` ends it", err)
		}
		return api.ExpireResponse{}, fmt.Errorf("expire node %s: %w", nodeID, err)
	}
	why := fmt.Sprintf("expired: unheard of for %s of the coordinator's uptime and its marker unchanged for %s (node_expiry %s)",
		ms(resp.AbsentMs), ms(resp.MarkerUnchangedMs), mp.cfg.NodeExpiry)
	if err := mp.forgetLocked(ctx, nodeID, why); err != nil {
		return api.ExpireResponse{}, err
	}
	mp.metrics.membersExpired.Inc()
	log.G(ctx).WithField("node", nodeID).WithField("absent", ms(resp.AbsentMs)).
		WithField("marker_unchanged", ms(resp.MarkerUnchangedMs)).WithField("node_expiry", mp.cfg.NodeExpiry).
		WithField("by", or(req.NodeID, "admin")).Warn("MEMBER EXPIRED: its references are dropped and its blobs may be reclaimed")
	return resp, nil
}

// markerReported records that reaper reported node's marker in state now,
// and returns how long (the coordinator's uptime) that reaper has
// reported that state: 0 for a new state, another reaper's report, or no
// state. Callers hold mmu.
func (mp *memberPart) markerReported(node, reaper, state string, now time.Time) time.Duration {
	up := now.Sub(mp.timing.started)
	byReaper := mp.markers[node]
	if state == "" {
		delete(byReaper, reaper)
		return 0
	}
	if r, ok := byReaper[reaper]; ok && r.state == state {
		return up - r.since
	}
	if byReaper == nil {
		if mp.markers == nil {
			mp.markers = map[string]map[string]markerReport{}
		}
		byReaper = map[string]markerReport{}
		mp.markers[node] = byReaper
	}
	byReaper[reaper] = markerReport{state: state, since: up}
	return 0
}

// expiryDue fails with ErrNotExpired unless both measures of r reach the
// node expiry.
func expiryDue(r api.ExpireResponse) error {
	switch {
	case r.AbsentMs < r.NodeExpiryMs:
		return fmt.Errorf("the coordinator has not heard from it for only %s of its uptime, less than node_expiry %s: %w",
			ms(r.AbsentMs), ms(r.NodeExpiryMs), api.ErrNotExpired)
	case r.MarkerUnchangedMs < r.NodeExpiryMs:
		return fmt.Errorf("its marker was seen unchanged for only %s, less than node_expiry %s: %w",
			ms(r.MarkerUnchangedMs), ms(r.NodeExpiryMs), api.ErrNotExpired)
	}
	return nil
}

func ms(n int64) time.Duration { return time.Duration(n) * time.Millisecond }

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
