package lockserver

import (
	"fmt"
	"time"

	"github.com/sharedcontent/sharedcontent/lockserver/api"
)

// The reference rule (docs/design.md §8.4): a reference is recorded only
// for a member with a live session, the one the session checks (instance,
// lineage: lineage.go) admitted, or, within a session TTL of the
// coordinator's start serving, for a recorded member that has had no session here
// yet (the start grace, below: older nodes do not know the refusal). Every path that adds a reference applies
// it here: POST /refs/add (addRef), a pull's unlock with success (Unlock),
// the expiry of a pull lease (keepHolderRef) and a sync (SyncRefs, which
// replaces the node's references). Otherwise a node that is no member (a
// forgotten one, whose stray call arrives late) would hold a reference
// that nothing ever drops: no sync of a non-member replaces it, and
// expiry and forget need a member. A node whose session lapsed is a
// member, but unsynced: its next session syncs its whole journal, which
// has the blob, so refusing it loses nothing and keeps one rule.
//
// The refusal is api.ErrNoSession (409 no_session) and changes nothing;
// the node opens its session again, then retries.
//
// A reference admitted is counted in its member (refsWriting) until it is
// durable, and a member is forgotten only while none is (forgetLocked):
// the session may lapse, and an operator forget it, between the check and
// the write's commit.

// A coordinator's first session TTL. Nodes older than the reference rule
// (before main's 7d22b3e) do not know its refusal: after a coordinator's
// start, until their next renewal there, they failed the pull whose
// reference was refused. So within one session TTL of the moment the
// coordinator can answer (its state loaded: memberPart.serving; for a
// standby, after its takeover, however long the load took), a recorded member that has had no session here yet (its session
// at the coordinator before may still have been live) has its references
// admitted (refMember). It is unsynced meanwhile, as every member is
// after a start, so no delete counts on them, and its sync in its next
// session replaces them with its journal's: an admitted reference costs
// at most a blob kept until then. A member forgotten or never recorded is
// refused as before (docs/design.md §10.7).

// refMember returns node's member if the reference rule admits its
// references now: a live session, or the start grace above. Else
// api.ErrNoSession naming what for. Callers hold mmu.
func (mp *memberPart) refMember(what, node string, now time.Time) (*member, error) {
	if m := mp.members[node]; m != nil && m.sessionUntil.IsZero() && now.Before(mp.serving.Add(mp.cfg.SessionTTL)) {
		return m, nil
	}
	return mp.liveMember(what, node, now)
}

// liveMember returns node's member if it holds a live session, else
// api.ErrNoSession naming what for. Callers hold mmu.
func (mp *memberPart) liveMember(what, node string, now time.Time) (*member, error) {
	m := mp.members[node]
	switch {
	case m == nil:
		return nil, fmt.Errorf("%s: node %s is not a member (never joined, or forgotten): open its session, then retry: %w", what, node, api.ErrNoSession)
	case !m.live(now):
		return nil, fmt.Errorf("%s: node %s holds no live session (it lapsed, or this coordinator restarted or took over since): open its session, then retry: %w", what, node, api.ErrNoSession)
	}
	return m, nil
}

// admitRef applies the reference rule to node's reference to resourceID,
// and tells a sync of node in progress about it (noteRef). On success the
// reference counts as being written until done is called, once the write
// is durable or has failed. Callers hold the resource's shard mutex (lock
// order: shard, mmu).
func (mp *memberPart) admitRef(node, resourceID string, now time.Time) (done func(), err error) {
	mp.mmu.Lock()
	defer mp.mmu.Unlock()
	m, err := mp.refMember("refs "+resourceID, node, now)
	if err != nil {
		mp.metrics.noSessionRefusals.Inc()
		return nil, err
	}
	mp.syncs.noteChange(m, resourceID, true)
	m.refsWriting.Add(1)
	return func() { m.refsWriting.Add(-1) }, nil
}

// whileAdmitted applies the reference rule to node's reference to
// resourceID, tells a sync of node in progress about it, and runs write
// with the refusal (nil: admitted) while mmu is held, so that a Forget
// cannot land between the rule and the write (membersView). Callers may
// hold the resource's shard mutex (lock order: shard, mmu, refcount
// stripes).
func (mp *memberPart) whileAdmitted(node, resourceID string, now time.Time, write func(refused error) error) error {
	mp.mmu.Lock()
	defer mp.mmu.Unlock()
	m, err := mp.refMember("refs "+resourceID, node, now)
	if err == nil {
		mp.syncs.noteChange(m, resourceID, true) // noteRef, with mmu held
	}
	return write(err)
}
