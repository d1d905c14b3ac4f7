// Package lockserver is the coordinator's lock manager (docs/design.md §3):
// Coordinator, the whole coordinator in process, with no HTTP type. It is a
// thin front over parts that each own their state and their mutexes
// (§3.11): the locks part (locks.go), the references part (references.go)
// and the members part, whose two halves are the members and their
// sessions (memberpart.go) and the members' syncs (syncs.go). The parts
// talk through the interfaces of seams.go.
//
// Locks. Resources are spread over shards by FNV-1a of the resource ID, so
// every lock type of one resource is decided under one mutex (§3.1). Each
// (type, resource) has a FIFO queue; only a pull and an update may be held
// together (§3.2). A grant is a lease with a fence, kept by keepalives and
// released as a failure when they stop (§3.5); successful pulls and
// deletes are remembered so that later requests skip (§3.3). One sweeper
// per shard expires leases and prunes; no lock has a goroutine.
//
// References and members. The Coordinator keeps each blob's reference set (§3.7),
// the members with their sessions and syncs (§8.3, §8.4), a reference
// recorded only for a node with a live session (§8.4, refrule.go), one live
// instance per node ID (§8.5), the cluster's identity and epoch, adoption
// and forgetting (§8.10), member expiry on the reaper's evidence (§8.4),
// the delete rule (§8.7) and remembered deletes (§8.9). Its durable state
// goes through refcount.Storage, written before anything changes in
// memory: a write the database refuses changes nothing (§3.11). Locks,
// queues and leases live in memory only; after a restart holders find
// their lease unknown, waiters reconnect and every member syncs again.
//
// lockserver/httpserver serves a Coordinator over HTTP; lockclient.NewEmbedded
// drives one in process. The wire types are lockserver/api.
package lockserver
