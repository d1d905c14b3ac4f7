package lockserver

import (
	"context"
	"fmt"
	"time"

	"github.com/sharedcontent/sharedcontent/lockserver/api"
	"github.com/sharedcontent/sharedcontent/refcount"
)

// Bystanders (docs/design.md §10.3). On a coordinator
// without node identities anyone may open a session under any node ID, and
// every such session made a permanent member that every delete waited for
// (docs/design.md §10.3: 20k one-off sessions blocked deletes until --node-expiry, a
// week, or an operator's forget).
//
// A bystander is a member whose sessions never named the cluster (a real
// node names the cluster of its shared root, from the root's cluster
// file), never authenticated as the node, and which has completed no sync
// since it joined. The rule: a bystander absent for Config.BystanderAfter
// of the coordinator's uptime (measured as for expiry, §8.4) no longer
// holds deletes up; its references, if any, still count, and it stays a
// member (GET /nodes shows it; `sharedcontentctl node forget` removes
// it). A session that names the cluster or is authenticated as the node,
// or a completed sync, ends being a bystander for good.
//
// Why no blob is lost: a delete waits for an unsynced member because the
// member may use blobs the coordinator has no reference of: ones it used
// failing open (§8.8), which only its journal records. A node fails open
// only once its journal records that it is a member of its root's
// cluster, and a node records that only after a sync of it completed
// (contentv2/session.go), which ends being a bystander. So a bystander's
// node has used no blob unregistered: every blob it uses has its
// reference, which the delete rule's first half still counts.

// bystanderSession reports whether a session request leaves its member a
// bystander: it names no cluster and was not authenticated as its node.
func bystanderSession(req api.SessionRequest) bool {
	return req.ClusterID == "" && !req.Identified
}

// noLongerBystander persists that m is no longer a bystander, when it was
// and ok says so. Callers hold mmu.
func (mp *memberPart) noLongerBystander(ctx context.Context, m *member, ok bool) error {
	if !ok || !m.rec.Bystander {
		return nil
	}
	rec := m.rec
	rec.Bystander = false
	if err := mp.commit(ctx, new(refcount.Batch).PutMember(rec)); err != nil {
		return fmt.Errorf("session of node %s: %w", rec.ID, err)
	}
	m.rec = rec
	return nil
}

// letGo reports whether the delete rule no longer waits for m: a
// bystander absent for BystanderAfter. Callers hold mmu.
func (mp *memberPart) letGo(m *member, now time.Time) bool {
	return mp.cfg.BystanderAfter > 0 && m.rec.Bystander && !m.live(now) && mp.absence(m, now) >= mp.cfg.BystanderAfter
}
