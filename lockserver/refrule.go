package lockserver

import (
	"fmt"
	"time"

	"github.com/sharedcontent/sharedcontent/lockserver/api"
)

// The reference rule (docs/design.md §8.4): a reference is recorded only
// for a member with a live session, the one the session checks (instance,
// lineage: lineage.go) admitted. Every path that adds a reference applies
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
	m, err := mp.liveMember("refs "+resourceID, node, now)
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
	m, err := mp.liveMember("refs "+resourceID, node, now)
	if err == nil {
		mp.syncs.noteChange(m, resourceID, true) // noteRef, with mmu held
	}
	return write(err)
}
