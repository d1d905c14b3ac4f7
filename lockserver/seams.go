package lockserver

import (
	"context"
	"time"

	"github.com/sharedcontent/sharedcontent/lockserver/api"
	"github.com/sharedcontent/sharedcontent/refcount"
)

// The seams between the coordinator's parts (docs/design.md §3.11). The
// locks part (locks.go) and the references part (references.go) each own
// their state and their mutexes; what one asks of another, or of the
// members, goes through the interfaces below, and no part reaches into
// another's fields.
//
// Lock order across the parts: a resource's shard mutex (locks part),
// then the members' mutex, then a reference stripe's mutex (references
// part), then the refcount Manager's stripes.

// membersView is the members part as the locks and references parts see
// it: the reference rule (docs/design.md §8.4, refrule.go), the sync a
// node's own reference change must tell, and the members' half of the
// delete rule (§8.7). Each method takes and releases the members' mutex
// itself; callers may hold a shard mutex, never a reference stripe's.
type membersView interface {
	// admitRef applies the reference rule to node's reference to
	// resourceID (api.ErrNoSession unless node holds a live session)
	// and tells node's sync in progress of it. The member is kept until
	// done is called, once the write is durable or has failed.
	admitRef(node, resourceID string, now time.Time) (done func(), err error)
	// whileAdmitted applies the reference rule as admitRef does and runs
	// write with its refusal (nil: admitted), with the members held
	// still throughout, so that no forget lands between the rule and
	// the write (a pull lease's expiry, leases.go).
	whileAdmitted(node, resourceID string, now time.Time, write func(refused error) error) error
	// noteRef tells node's sync in progress, if any, that node's own
	// reference to resourceID was added or removed after the sync began.
	noteRef(node, resourceID string, added bool)
	// checkClash refuses a delete by node while another instance of its
	// node ID knocks (api.ErrDuplicateNode).
	checkClash(resourceID, node string, now time.Time) error
	// allSynced is the members' half of the delete rule: it runs noRefs
	// (the references' half; nil: none) with the members held still, so
	// that no sync lands between the two halves, then refuses with
	// api.UnsyncedError unless every member is synced. noRefs adds, with
	// withSyncing, the references a sync being written adds to the set
	// it read.
	allSynced(resourceID string, now time.Time, noRefs func(withSyncing func(refcount.Set) refcount.Set) error) error
}

var _ membersView = (*memberPart)(nil)

// syncsView is the syncs (syncs.go) as the members' other half,
// memberPart, sees them: what a member's own reference change, the end of
// its session and the delete rule need of its sync. Callers hold the
// members' mutex.
type syncsView interface {
	// noteChange tells m's sync in progress, if any, that m itself
	// added (or removed) a reference to resourceID after it began.
	noteChange(m *member, resourceID string, added bool)
	// endSync drops m's unfinished sync, if any, and its buffer.
	endSync(m *member)
	// writingRefs adds to rc the nodes whose sync is being written and
	// that added a reference to resourceID meanwhile.
	writingRefs(resourceID string, rc refcount.Set) refcount.Set
}

var _ syncsView = (*syncs)(nil)

// referenceRules is the references part as the locks part sees it: the
// rules on references a lock request obeys (the delete rule, §8.7; the
// reap rules, §8.12; update_requires_no_ref), the reference writes of a
// successful unlock and of a pull lease's expiry, and the resources'
// recent activity. Callers hold the resource's shard mutex.
type referenceRules interface {
	// checkDelete admits a new delete request: the reap rules if the
	// reaper asks, else the requester's own reference goes; then the
	// delete rule.
	checkDelete(ctx context.Context, req api.LockRequest, now time.Time) error
	// checkGrantRefs re-checks, when a queued delete or update reaches
	// the head of its queue, what was checked when it queued.
	checkGrantRefs(ctx context.Context, resourceID string, req request) error
	// checkNoOtherRefs refuses an update while another node references
	// the resource (update_requires_no_ref).
	checkNoOtherRefs(ctx context.Context, resourceID, node string) error
	// checkDeleteUnlock checks a delete's unlock(success); a refusal
	// says why, as a release reason.
	checkDeleteUnlock(ctx context.Context, resourceID string, g *grant, now time.Time) (reason string, err error)
	// checkSynced is the delete rule's members' half alone (a delete
	// lease's keepalive).
	checkSynced(resourceID string, now time.Time) error
	// recordSuccess writes what a successful unlock of g changes in the
	// reference sets, with the references of the waiters askers (a
	// pull's, api.LockRequest.AddRef) the reference rule admits, which it
	// returns (added); done ends the references' being written.
	recordSuccess(ctx context.Context, resourceID string, g *grant, endsDelete bool, askers []requestKey, now time.Time) (added map[requestKey]struct{}, done func(), err error)
	// keepHolderRef writes the reference of g, a pull lease that
	// expired, and reports whether it is written.
	keepHolderRef(ctx context.Context, resourceID string, g *grant, now time.Time) bool
	// noteActivity records that the resource was pulled or its
	// references changed (the reap grace).
	noteActivity(resourceID string, now time.Time)
	// pruneRecent forgets the activity, older than the reap grace, of
	// the resources of shard i (the shard's sweep).
	pruneRecent(i int, now time.Time)
}

var _ referenceRules = (*references)(nil)

// resourceLocks is the locks part as the references part sees it: one
// resource held still (its shard mutex) while a reference is decided
// against the delete in flight or retained, and who holds the reaper's
// lock (for the reap rules).
type resourceLocks interface {
	// hold takes resourceID's shard mutex; the caller releases it with
	// the answer's release.
	hold(resourceID string) heldResource
	// reaper returns the record of the reaper's lock's holder, nil when
	// nobody holds it (reaplock.go).
	reaper() *reapHolder
}

var _ resourceLocks = (*locks)(nil)

// heldResource is one resource held still (resourceLocks.hold): the
// delete in flight or retained that a reference is decided against.
type heldResource interface {
	// deleting returns the node whose delete of the resource is in
	// flight.
	deleting() (node string, ok bool)
	// deleted returns the resource's retained delete completion, or nil.
	deleted() *completion
	// endDeleted forgets the retained delete completion: the resource
	// is in use again, so a later delete must really run.
	endDeleted()
	// release lets the resource go.
	release()
}
