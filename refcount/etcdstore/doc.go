// Package etcdstore is the refcount.Storage on etcd, the durable state of
// coordinator replicas (docs/design.md §7, §7.1). A handle belongs to the
// winner of an election: its fence is the election key's create revision
// (concurrency.Election.Rev), and every Commit is a transaction
// If(CreateRevision(leader key) == fence), so a replica that lost its
// election (its key deleted on resign or on the end of its session, or a
// newer winner's key) writes nothing more: its Commits fail with an error
// wrapping refcount.ErrFenced.
//
// # Layout
//
// Every key is under the handle's prefix (docs/design.md §7.1 has the
// table). A reference is two empty-valued keys, refs/<resource>\x00<node>
// and nodes/<node>\x00<bucket><resource> (the resource's synchash.Bucket in
// two hex digits): adding or dropping one writes two keys whatever the
// set's size, a set is one range read (and counted with a count-only
// read, RefState), and a node's references (what ReplaceNode replaces)
// are one range read of its index, not a scan of every set; those in
// some buckets (ReplaceNodeBuckets) one range per bucket.
// Members, delete markers and completions are JSON values, one key each;
// the identity is one JSON key, the fence high-water mark and meta values
// one key each. Heartbeats write nothing: a member's LastSeen is written
// when the coordinator chooses to (docs/design.md §8), and nodes hold no
// etcd lease.
//
// # Transactions
//
// etcd refuses a transaction of more than --max-txn-ops writes (128 by
// default, Options.MaxTxnOps) or more than --max-request-bytes, and one
// that writes a key twice. Commit folds a batch's writes, in order, into
// the last value of each key (reading only the set a DropRefs drops and
// the references a ReplaceNode replaces), leaves out keys that already
// hold that value, and commits the result in as few transactions as fit,
// split at the batch's Break only. A group that alone does not fit fails
// the Commit with errdefs.ErrResourceExhausted before anything is
// written: a reference counts two writes, so one group holds at most 64
// reference changes under etcd's default limit (refcount/doc.go, "The
// size of a transaction").
//
// # Group commit
//
// Submit (refcount.Storage) queues a checked copy of a
// batch, and one flusher folds the pending batches, in order, into one
// guarded transaction (keys written by several written once, the last
// write winning) when the oldest has waited Options.FlushInterval (5 ms
// by default), or when they fill a transaction, whichever comes first.
// Commit is a Submit flushed at once. A batch's groups never straddle two
// transactions; a batch larger than one is committed alone. A failed
// guard fails every batch of its transaction, and the handle fails every
// later one at once. Metrics counts the transactions (docs/design.md
// §7.1). SubmitAddRef (refcount.CountingSubmitter) is the coordinator's
// reference add: not read first, it learns from its transaction whether
// the node was in the set (the put's previous value) and the set's size
// (a count-only read after the transaction's writes), so an add costs no
// round trip of its own.
//
// Reads are linearizable (etcd's default): a leader reads what it and
// every earlier leader committed. A walk of the reference keys (List)
// reads windows whose range ends are about one read apart, since etcd
// visits every key up to a read's range end whatever its limit
// (window.go).
//
// # Standbys
//
// Warm keeps every node's reference hash as a standby: one walk of
// refs/, then a watch from the walk's revision (a created key adds its
// resource to its node's hash, a deleted one removes it). A new leader's
// Manager takes them (refcount.HashSource) once the watch has delivered
// every event up to etcd's revision after the leader's first guarded
// write, instead of walking every reference; a compacted or broken watch
// makes the Warm cold, and the leader walks (docs/design.md §7.2).
package etcdstore
