// Package lockserver is the sharedcontent coordinator's lock manager
// (docs/design.md): a sharded lock manager with one FIFO queue per (type,
// resource), leases with keepalive and expiry, retained completions,
// persisted reference sets, the members and their sessions and syncs, the
// delete rule, and the cluster's identity.
//
// Locker is the in-process API; it knows no HTTP. Package
// lockserver/httpserver serves it over HTTP. Locks, queues and leases live
// in memory: after a restart, holders find their lease unknown and waiters
// reconnect. Reference sets and the fence high-water mark are persisted
// before a call returns.
package lockserver
