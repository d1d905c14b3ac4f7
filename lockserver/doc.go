// Package lockserver is the sharedcontent coordinator (SPEC §3): a sharded
// lock manager with one FIFO queue per (type, resource), leases with
// keepalive and expiry, retained completions, persisted reference counts and
// the HTTP API with Server-Sent Events that lockclient speaks.
//
// Locker is the in-process API; Server serves it over HTTP. Locks, queues
// and leases live in memory: after a restart, holders find their lease
// unknown and waiters reconnect. Reference counts and the fence high-water
// mark are persisted (bbolt) before a call returns.
package lockserver
