// Package election runs a coordinator replica (docs/design.md §7): it
// campaigns in an etcd election, and while it leads it serves a
// Coordinator of its own on the etcd store, every write guarded by the
// election key's create revision (refcount/etcdstore). A replica that
// stands by answers not_leader with the leader's URL.
//
// A leader steps down at once, and campaigns again with a new session,
// when its etcd session ends, when a guarded write fails (another replica
// has taken over), or when its own keepalives have gone unacknowledged
// long enough that its lease may lapse (a watchdog that fires before etcd
// can expire the lease). Stepping down stops answering first, then closes
// the store and the term's Coordinator: its event streams end and its
// queues and grants are dropped.
package election
