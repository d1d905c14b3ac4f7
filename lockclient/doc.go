// Package lockclient is the Go client of the sharedcontent lock coordinator
// (SPEC §4): it takes pull, update and delete locks on a resource, waits in
// the coordinator's FIFO queue, keeps the lease alive while the caller works,
// and releases it with the outcome.
//
// A Client talks to a remote lock server over HTTP (New) or drives an
// in-process coordinator directly (NewEmbedded); both give the same results
// and the same errors, which match the sentinels of this package with
// errors.Is.
//
// A held lock is NOT a guarantee that nobody else works on the resource: if
// the lease cannot be renewed (network partition, coordinator restart) the
// coordinator hands the lock to the next waiter after the lease TTL. Lease.Lost
// reports that, and Lease.Fence orders the holders for anyone who can check it.
package lockclient
