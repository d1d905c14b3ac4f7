package lockserver

import (
	"context"
	"time"

	"github.com/sharedcontent/sharedcontent/internal/synchash"
	"github.com/sharedcontent/sharedcontent/refcount"
)

// syncs is the members part's second half, the members' syncs
// (docs/design.md §3.11, §8.3, §10.4, §10.5): the steps of a node's sync
// (sync.go, syncstep.go, synchash.go), their admission and buffers
// (syncbounds.go) and the done sync's write (syncwrite.go). The Coordinator's SyncRefs hands each request to it.
//
// A sync is a member's state (member.sync, member.writing), so syncs
// reach their members through mp and change them under the members'
// mutex, mp.mmu, which guards syncLimits' counts and sets too: syncs take
// no mutex of their own. Of the members part they use the members
// (mp.members), the reference rule (mp.liveMember) and that mutex; the
// members part asks them only to drop a member's sync (endSync) and for
// the references a sync being written adds (writingRefs), under mmu. Lock
// order: as the members' (a shard's mutex, then mmu, then the refcount
// Manager's stripes); a done sync's write holds none of them.
type syncs struct {
	cfg  Config
	refs *refcount.Manager
	// commit writes a batch, noting the store's health (state_store.go).
	commit func(context.Context, *refcount.Batch) error
	now    func() time.Time
	// timing is the timing rule a sync's done obeys (timing.go).
	timing *timingRule
	// mp is the members whose syncs these are.
	mp *memberPart
	// syncLimits admits syncs and accounts their buffers (syncbounds.go).
	syncLimits  *syncLimits
	syncMetrics *syncMetrics
	// sliceRefs bounds a big write's transactions (commitSlices):
	// refcount.SliceRefs (tests lower it).
	sliceRefs int
	// share gathers first syncs' writes into shared transactions
	// (syncshare.go).
	share *syncShare
}

// nodeSync is a full sync being received.
type nodeSync struct {
	id   string
	refs map[string]struct{}
	// since records the node's own reference changes made after the sync
	// started (true: added, false: removed). They win over the chunks:
	// the node's snapshot may be older than them.
	since map[string]bool
	// buckets, in a sync by hash, are the buckets whose hashes differed:
	// the chunks carry their resource IDs only, and Done replaces only
	// them. Nil: a full sync.
	buckets *refcount.BucketSet
	// touched is when the node last sent a chunk (for SyncTimeout).
	touched time.Time
	// sent counts the resource IDs of the chunks received, and last is
	// what it counted before the last one (checkChunkOffset).
	sent, last int
	// writing: the done chunk was received and the sync is being written
	// (syncwrite.go); since then collects the node's changes made
	// meanwhile, and written is what of them was written again.
	writing bool
	written map[string]bool
	// ended is closed when the write ends (finishSync).
	ended chan struct{}
	// free: an older node's re-sync, which takes no sync slot unless its
	// done writes; sum is the hash of refs, kept as they are buffered
	// (olderresync.go).
	free bool
	sum  synchash.Sum
}

// maxSyncRefs bounds the references one node may sync.
const maxSyncRefs = 1 << 24
