package lockserver

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sharedcontent/sharedcontent/lockserver/api"
	"github.com/sharedcontent/sharedcontent/refcount"
)

// memberPart is the coordinator's members part (docs/design.md §8.4): the
// members, their sessions and expiry, the markers the reapers report, the
// shared root's claim and the cluster's identity, all under its own
// mutex, mmu. Their syncs are the syncs type's (syncs.go), under the same
// mmu. The Coordinator embeds it, so its exported methods (Session,
// EndSession, Forget, Nodes, Adopt, Release, Cluster) are the
// Coordinator's.
//
// The other parts reach it only through the two rules that cross them,
// holding mmu: the delete rule (deleterule.go: unsyncedLocked,
// writingRefs, syncedError) and the reference rule (refrule.go:
// liveMember, and noteRef for a sync in progress).
//
// Lock order: a shard's mutex, then mmu, then the refcount Manager's
// stripes.
type memberPart struct {
	cfg     Config
	refs    *refcount.Manager
	state   refcount.Storage // the Manager's storage; written only through it
	metrics *metrics
	now     func() time.Time
	// timing is the timing rule (timing.go): session answers are
	// stamped with the uptime since the Coordinator started.
	timing *timingRule
	// syncs are the members' syncs (syncs.go), seen through seams.go: a
	// member's own reference change is noted in its sync in progress; a
	// lapse, an end, a forget or an adoption drops it; and the delete
	// rule counts a sync's write in progress (writingRefs).
	syncs syncsView
	// commit writes a batch, noting the store's health (state_store.go).
	commit func(context.Context, *refcount.Batch) error

	cluster atomic.Pointer[api.Cluster] // the coordinator's identity (cluster.go)

	// mmu protects what follows (docs/design.md §8.4; members.go).
	mmu     sync.Mutex
	members map[string]*member
	// markers: member → reaper → its marker's state as that reaper
	// reported it (expire.go).
	markers map[string]map[string]markerReport
	// root is the cluster's shared root as recorded (rootclaim.go); nil
	// while none is.
	root *refcount.RootClaim
	// serving is when the Coordinator had loaded its state and could
	// answer (the end of NewCoordinator; a standby's takeover included):
	// the start grace counts from here (refrule.go).
	serving time.Time
	// olderMembers counts the members whose last session was in the
	// older shape (olderstreams.go).
	olderMembers int
}
