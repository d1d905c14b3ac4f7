package lockserver

import (
	"time"

	"github.com/sharedcontent/sharedcontent/lockserver/api"
)

// An older node's renewal (docs/design.md §10.7). A node of the shape
// before the timing rule (timing.go) sends its session requests with no
// instance ID and no echo, and counts its fail-open delay from the last
// session answer it received: TTL + TTL/10 + 2 s. Without an echo the
// coordinator cannot tell a renewal from a delayed open, so each such
// request used to open an unsynced session, and the node sent its whole
// journal at every renewal (every TTL/3).
//
// What a sync proves is enough instead. An older node syncs only after
// it received a session answer saying it is not synced, and the sync's
// last chunk arrives within TTL/3 of that answer (checkDoneLate): so the
// node received an answer no earlier than the coordinator's last one
// before the sync, and cannot fail open before that answer + TTL (its
// delay is longer). A sync of an older node therefore vouches for it
// until the session it was made in lapses (vouchedUntil, set by
// markSynced), which is exactly how long such a sync kept it synced
// before this rule, when no other request came. A renewal of that shape
// within the vouch keeps the node synced and extends its session, but
// not the vouch: a delayed request cannot make the node count as synced
// one moment longer than its last sync proved. Once half the vouch has
// passed, the renewal's answer says "not synced", so the node syncs
// again while it still counts as synced (a sync never makes its node
// unsynced: syncwrite.go); the new sync renews the vouch. With renewals
// every TTL/3 that is one sync every other renewal, and a node whose
// journal did not change costs no write (sameAsStored, syncwrite.go).
//
// Past its vouch the node counts as unsynced (syncedAt), and its next
// renewal opens an unsynced session, as before. Nodes that send an
// instance ID (every node since the timing rule) are not concerned: a
// request of theirs without a valid echo opens an unsynced session.

// olderRenewal reports whether req renews m's live session in the older
// shape (no instance ID, no echo, from a node that never sent an
// instance ID) while m's last sync still vouches for it. Callers hold
// mmu.
func olderRenewal(req api.SessionRequest, m *member, now time.Time) bool {
	return req.Echo == nil && req.InstanceID == "" && m.instance == "" &&
		m.synced && m.live(now) && !m.vouchedUntil.IsZero() && now.Before(m.vouchedUntil)
}

// olderResyncDue reports whether an older node, kept synced by
// olderRenewal, is asked to sync again: half of its vouch has passed.
// Callers hold mmu.
func (mp *memberPart) olderResyncDue(m *member, now time.Time) bool {
	return !now.Before(m.vouchedUntil.Add(-mp.cfg.SessionTTL / 2))
}

// vouched reports whether m's last sync still vouches for it at now
// (always, for a node whose renewals echo). Callers hold mmu.
func (m *member) vouched(now time.Time) bool {
	return m.vouchedUntil.IsZero() || now.Before(m.vouchedUntil)
}
