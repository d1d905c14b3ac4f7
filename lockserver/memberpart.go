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
// members, their sessions, syncs (sync.go, syncwrite.go) and expiry, the
// markers the reapers report, the shared root's claim and the cluster's
// identity, all under its own mutex, mmu. The Coordinator embeds it, so
// its exported methods (Session, SyncRefs, EndSession, Forget, Nodes,
// Adopt, Release, Cluster) are the Coordinator's.
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
	// started is when the Coordinator started (monotonic, by now):
	// session answers are stamped with the uptime since (timing.go).
	started time.Time
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
	// syncLimits admits syncs and accounts their buffers (syncbounds.go).
	syncLimits  *syncLimits
	syncMetrics *syncMetrics
}
