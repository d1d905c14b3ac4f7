// Package refcount holds reference sets, which nodes use a blob, and the
// storage of the coordinator's durable state (docs/design.md §3.7, §8.10).
//
// Storage is the one interface for all of that state: the reference sets,
// the members, the cluster's identity and epoch, the fence high-water mark,
// and the deletes granted or completed (§8.9). Every change is part of a
// batch committed as one transaction, all of it or none, so that what
// must change together (an adopt, a forget, a delete's reference drop and
// completion) does; writes arriving while a commit runs share the next
// one. It is shaped for a store where every write is a guarded
// transaction, such as etcd (§7). Implementations keep it in memory and in
// bbolt; refcount/storagetest is the conformance suite that both pass.
//
// Manager applies the reference rules over a Storage. The package imports
// nothing of lockserver: the wire types sit above it.
package refcount
