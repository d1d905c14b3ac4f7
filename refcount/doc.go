// Package refcount keeps the coordinator's durable state: the reference
// sets (which nodes reference each blob), the members, the coordinator's
// identity, the fence high-water mark, small meta values, the deletes
// in flight or completed, and the leases that survive a failover
// (docs/design.md §3.7, §8.9, §8.10). It holds the model (Set, Member,
// DeleteMarker, DeleteCompletion, LeaseRecord), the
// Storage interface with its in-memory and bbolt implementations, the
// conformance suite every implementation passes (refcount/storagetest),
// and the Manager that serializes changes to one reference set.
//
// # One write path: guarded, batched transactions
//
// Storage is shaped for a store where every write is a transaction
// guarded by the writer's fence, and writes are batched, such as etcd (§7)
// (If(CreateRevision(leaderKey) == fence) around every Txn). So:
//
//   - Reads (Get, List a page at a time, ListMembers, Identity, LeaseFenceMark,
//     the meta getters, Deletes, Leases) are plain reads.
//   - The only write is Commit of a Batch of typed writes: add or drop a
//     reference, drop a reference set, replace a node's references, put or
//     delete a member, put the identity, the fence high-water mark or a
//     meta value, put or drop a delete marker or completion or a lease
//     record.
//   - Every Commit checks the handle's guard in the same transaction. A
//     handle is opened as the owner of the state (bbolt: opening the file
//     bumps a stored owner fence; memory and bbolt: TakeOver opens a newer
//     handle in-process; etcd: the leader's election revision). Once a
//     newer handle exists, the older one's Commits fail with ErrFenced,
//     which wraps errdefs.ErrFailedPrecondition: its owner must stop
//     writing (a coordinator steps down).
//
// # The size of a transaction
//
// etcd refuses a Txn of more than 128 operations (--max-txn-ops, default
// 128; MaxGroupWrites) or of more than about 1.5 MiB (--max-request-bytes), so
// a store on etcd may commit a big Batch as several transactions, one
// atomic group (Batch.Break) after the other, and may stop between two (a
// failure; a failover, whose new leader reads what was committed). It
// never splits a group; memory and bbolt commit every batch whole. What
// needs atomicity is small:
//
//   - a delete's unlock: DropRefs, DropDeleting and PutDeleted of the
//     resource (3 writes);
//   - a pull's unlock: AddRef and DropLease of its lease record, and
//     DropDeleted when it ends a delete's completion (3);
//   - a reference that ends a delete's completion: AddRef and DropDeleted
//     (2).
//
// The coordinator's big batches are instead ordered so that every prefix
// of their groups is safe, and cut into groups that fit
// (docs/design.md §7.1):
//
//   - a full sync: the node's references first, cut by bucket
//     (Manager.ReplaceNodeGroups: at most GroupRefs references changed a
//     group, as estimated from the node's hash; one write on memory and
//     bbolt, which commit whole), or one AddRef a group
//     from a new journal generation; the member record with its
//     generation last, alone. The node is synced only once all of it is
//     written;
//   - forgetting a node: its references first (ReplaceNodeGroups with
//     none), DeleteMember last: a member left with part of its references
//     is unsynced, so deletes still wait for it;
//   - adopting a cluster: one PutMember a group, PutIdentity last: never
//     the new identity without every member.
//
// A Commit that fails marks the nodes whose references it changes
// (their hashes may not be what was stored), so their next sync is whole.
// A bucket too big for a group gets its additions as AddRefs first and,
// when it surely drops more than a group holds (a forget of a big node),
// its drops as RemoveRefs, read from the store's index by node
// (Storage.NodeRefs). One
// limit is left: a sync that both adds and drops more than about 64
// references in one bucket (a node that swapped some 16,000 references
// for others since it last synced) still fails on such a store, after
// the groups before that bucket. The rest (a coordinator's start turning
// delete markers into completions, pruning completions, the members'
// last session at a shutdown) is one small group per resource or member,
// separated by Break.
//
// # Adding a reference at a cost flat in the set's size
//
// Every store answers three calls beside the reference sets themselves
// (docs/design.md §10.2): RefState tells whether a node references a
// resource and how many nodes do without reading the set; Submit splits
// Commit into an ordering, done before it returns, and a wait for its
// durability, so that a caller orders writes under its own mutex and
// waits for the disk without it (etcd's Submit is group commit: the
// batches pending within a few milliseconds share one transaction,
// docs/design.md §7.1); NodeRefs reads the resources a node references
// from a per-node index the store keeps beside the sets. One optional
// interface remains: the etcd and bbolt stores are also CountingSubmitters,
// whose adds are not read first, and learn whether they changed the set and
// its size from the transaction that commits them (docs/design.md §7.1,
// §10.6).
// Manager.AddRefOrdered uses a CountingSubmitter, else RefState and
// Submit; the Manager's hash changes ask RefState whether a node is in a
// set instead of reading the set.
//
// Another optional one, NodeLister, lists a page of reference sets with each set's
// nodes already in order, without a Set per entry: bbolt reads them in
// the nested bucket's key order (docs/design.md §10.3). Manager.ListNodes
// uses it, and falls back to List on a store without it. A third,
// SetWalker, hands every set to a function as the store holds it, no page
// built: BuildHashes walks bbolt so, and bbolt lets go of the file's
// mapped pages after each of the walk's read transactions, so a
// restarted coordinator's memory does not grow with the references it
// walks (docs/design.md §10.9).
//
// # The bbolt layout
//
// bbolt keeps a reference set as a nested bucket of the refcounts bucket,
// one key per node and the count as the bucket's sequence, so adding one
// reference is O(log N) (bolt_refs.go). Beside it, the nodes bucket holds
// a nested bucket per node with one key per resource the node references
// (the resource's synchash bucket, one byte, then its ID; bolt_nodes.go),
// written in the same transaction as every change of a set. ReplaceNode
// (a full sync, forgetting a node) reads the node's index, not every set:
// O(the node's old and new references), whatever else is stored; a
// by-hash ReplaceNode seeks to the buckets it replaces. The meta key
// refs_format records the layout: 3 (sets and index). Opening a file
// migrates it: JSON records of before (no refs_format) become nested
// buckets in the open's transaction, and a file of format 2 (nested
// buckets, no index) gets its index built, about 100k references per
// transaction, the last recording 3; the next open builds it again if
// that was cut short, or if a coordinator of format 2 opened the file
// since (it ignores the index and records 2 again).
package refcount
