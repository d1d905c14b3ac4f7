package failpoint

// The failpoints, in the order the steps run. "store/…" points are in the
// node's content store (contentv2), "coord/…" points in the coordinator
// (lockserver, stand-alone or embedded). docs/design.md §8.16
// lists them with what the crash test found at each.
const (
	// A write (Writer, then Commit).
	StoreWritePullLocked   = "store/write/pull-locked"   // the blob's pull lock was granted
	StoreRefAfterJournal   = "store/ref/after-journal"   // the use is in the node journal, not yet at the coordinator
	StoreRefAfterCoord     = "store/ref/after-coord"     // the coordinator recorded the reference
	StoreWriteBeforeRename = "store/write/before-rename" // referenced; the ingest not yet renamed into blobs/
	StoreWriteAfterRename  = "store/write/after-rename"  // the blob is in blobs/; the pull lock still held
	StoreWriteAfterUnlock  = "store/write/after-unlock"  // the pull lock released with success

	// A delete (Delete, then removeLocked).
	StoreDeleteGranted      = "store/delete/granted"       // the delete lock was granted (the coordinator dropped this node's reference)
	StoreDeleteAfterJournal = "store/delete/after-journal" // the journal entry removed
	StoreDeleteAfterCheck   = "store/delete/after-check"   // the lease was confirmed right before the removal
	StoreDeleteAfterTrash   = "store/delete/after-trash"   // the blob renamed into .trash
	StoreDeleteAfterUnlock  = "store/delete/after-unlock"  // the delete lock released
	StoreDeleteAfterUnlink  = "store/delete/after-unlink"  // the trash entry unlinked

	// A session and its sync.
	StoreSessionAnswered = "store/session/answered" // the coordinator answered a session call
	StoreSyncAnnounced   = "store/sync/announced"   // the sync announced (empty first chunk)
	StoreSyncSnapshot    = "store/sync/snapshot"    // the journal snapshot taken
	StoreSyncAfterChunk  = "store/sync/after-chunk" // a chunk sent that is not the last
	StoreSyncAfterDone   = "store/sync/after-done"  // the last chunk (or equal hash) sent and answered

	// The coordinator's reference writes.
	CoordAddRefBefore       = "coord/addref/before-write"
	CoordAddRefAfter        = "coord/addref/after-write"
	CoordDeleteBeforeRefs   = "coord/delete/before-refs" // a delete request, before its requester's reference is dropped
	CoordDeleteAfterRefs    = "coord/delete/after-refs"
	CoordUnlockPullBefore   = "coord/unlock/pull/before-refs" // a successful pull's unlock, before its reference is written
	CoordUnlockPullAfter    = "coord/unlock/pull/after-refs"
	CoordUnlockDeleteBefore = "coord/unlock/delete/before-refs" // a successful delete's unlock, before the reference set is dropped
	CoordUnlockDeleteAfter  = "coord/unlock/delete/after-refs"
	CoordSyncBeforeReplace  = "coord/sync/before-replace" // the last chunk of a sync, before ReplaceNode
	CoordSyncAfterReplace   = "coord/sync/after-replace"

	// Adopt and forget, around their one transaction (members, cluster
	// id and epoch; references and member record).
	CoordAdoptBeforeCommit  = "coord/adopt/before-commit"
	CoordAdoptAfterCommit   = "coord/adopt/after-commit"
	CoordForgetBeforeCommit = "coord/forget/before-commit"
	CoordForgetAfterCommit  = "coord/forget/after-commit"
)

// Names lists every failpoint, in the order above.
var Names = []string{
	StoreWritePullLocked, StoreRefAfterJournal, StoreRefAfterCoord, StoreWriteBeforeRename,
	StoreWriteAfterRename, StoreWriteAfterUnlock,
	StoreDeleteGranted, StoreDeleteAfterJournal, StoreDeleteAfterCheck, StoreDeleteAfterTrash,
	StoreDeleteAfterUnlock, StoreDeleteAfterUnlink,
	StoreSessionAnswered, StoreSyncAnnounced, StoreSyncSnapshot, StoreSyncAfterChunk, StoreSyncAfterDone,
	CoordAddRefBefore, CoordAddRefAfter, CoordDeleteBeforeRefs, CoordDeleteAfterRefs,
	CoordUnlockPullBefore, CoordUnlockPullAfter, CoordUnlockDeleteBefore, CoordUnlockDeleteAfter,
	CoordSyncBeforeReplace, CoordSyncAfterReplace,
	CoordAdoptBeforeCommit, CoordAdoptAfterCommit, CoordForgetBeforeCommit, CoordForgetAfterCommit,
}
