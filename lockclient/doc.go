// Package lockclient is the Go client of the sharedcontent coordinator
// (docs/design.md §4). A Client speaks for one node: it takes
// pull, update and delete locks on a resource, waits in the lock's FIFO
// queue, keeps the granted lease alive while the caller works, and
// releases it with the outcome. It also adds and reads references, opens
// and ends the node's session, and syncs the node's journal; the admin
// calls (Nodes, Forget, Adopt, Expire, RefsList, WalkRefs) serve
// sharedcontentctl and the reaper.
//
// New returns a Client of a remote coordinator over HTTP: a queued Lock
// watches its request on the node's one event stream, shared by all its
// waits (docs/design.md §10.1), or on a stream of its own, or polls the
// lock's status where streams cannot be used. NewEmbedded returns one of
// an in-process coordinator (*lockserver.Coordinator), reached through the same
// Transport interface. Both give the same results and the same errors,
// which match the coordinator's sentinels (api.ErrLocked, api.ErrInUse, ...) with
// errors.Is. Network errors, timeouts and 5xx answers are retried; after
// the last retry the error matches api.ErrUnavailable. Given the URLs of a
// coordinator's replicas, New sticks to the leader and follows a standby's
// not_leader hint at once, but only to a listed URL (replicas.go,
// docs/design.md §4, §7).
//
// A held lock is NOT a guarantee that nobody else works on the resource:
// if the lease cannot be renewed (network partition, coordinator restart)
// the coordinator hands the lock to the next waiter after the lease TTL.
// Lease.Lost reports that, and Lease.Fence orders the holders for anyone
// who can check it.
package lockclient
