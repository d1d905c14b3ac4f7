package lockserver

import (
	"context"
	"fmt"

	"github.com/containerd/log"

	"github.com/sharedcontent/sharedcontent/lockserver/api"
)

// EndSession handles POST /nodes/session/end: a node's daemon, shutting
// down cleanly, ends its own session, so that its next start (another
// instance) is not refused as a duplicate until the session lapses
// (docs/design.md §8.5). Only the instance that holds the
// live session ends it; any other request changes nothing and says why.
//
// Why this is safe: ending a session sets it lapsed now (sessionUntil =
// now), unsynced, and drops any sync in progress, exactly the state a
// lapse leaves, only up to a TTL earlier. It never makes a node synced:
// a delete is granted only while every member is live and synced
// (unsyncedLocked), so from now on every delete waits until the node
// opens a new session and syncs its whole journal in it, as after a
// lapse; the dropped sync cannot finish (SyncRefs needs a live session),
// and a renewal arriving later reopens the session unsynced (Session). A
// node that stops renewing gets no more than this: the rule that makes
// its references safe while it is away is the unsynced member's, not the
// session's length. The node's absence (expire.go) counts from now, at
// most a TTL earlier than from the lapse; expiry still needs its marker
// unchanged for the whole node expiry too.
func (mp *memberPart) EndSession(ctx context.Context, req api.EndSessionRequest) (api.EndSessionResponse, error) {
	if err := validateID("node_id", req.NodeID); err != nil {
		return api.EndSessionResponse{}, err
	}
	if err := validateID("instance_id", req.InstanceID); err != nil {
		return api.EndSessionResponse{}, err
	}
	now := mp.now()
	mp.mmu.Lock()
	defer mp.mmu.Unlock()
	m := mp.members[req.NodeID]
	lg := log.G(ctx).WithField("node", req.NodeID).WithField("instance", req.InstanceID)
	switch {
	case m == nil || !m.live(now):
		return api.EndSessionResponse{Reason: fmt.Sprintf("node %s has no live session: nothing to end", req.NodeID)}, nil
	case m.instance != req.InstanceID:
		lg.WithField("live_instance", m.instance).Warn("end of session refused: the live session is another instance's")
		return api.EndSessionResponse{Reason: fmt.Sprintf("node %s's live session belongs to another instance: left as it is", req.NodeID)}, nil
	}
	m.sessionUntil = now
	m.synced = false
	mp.syncs.endSync(m)
	lg.Info("node ended its session (clean shutdown); deletes wait until it syncs again")
	return api.EndSessionResponse{Ended: true}, nil
}
