// Package api defines the JSON wire types of the sharedcontent coordinator's
// HTTP API (docs/design.md §3). It has no dependencies so that clients in any module can
// share it without pulling in the server.
//
// A queued lock request learns its outcome on an event stream
// (Server-Sent Events over HTTP/1.1), in one of two ways:
//
//   - GET /lock/subscribe?type=&resource_id=&node_id=&request_id= follows one
//     request (docs/design.md §3.6): a "state" event (a StatusResponse), then
//     one outcome (an Event named EventGranted, EventCompleted or
//     EventError), after which the stream ends. Without request_id it
//     watches a key until it closes.
//   - GET /lock/events?node_id= is the node's one stream for all its waits
//     (docs/design.md §10.1): a "state" event (a NodeStreamState, with the
//     stream limits in effect), then an Event for the outcome of each of the
//     node's queued requests that has no /lock/subscribe stream, with its
//     RequestID, as they happen; it does not end after an outcome. A node
//     has at most one: a newer one ends the older. When it closes, the
//     node's requests keep their place for a lease TTL; a grant made
//     meanwhile is read (and claimed) with GET /lock/status.
//
// Both send ": keepalive" comments while idle. A stream over a limit is
// refused with 429 (CodeTooManyRequests) and Retry-After; the client then
// polls /lock/status.
package api
