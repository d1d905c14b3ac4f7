// Package httpserver is the coordinator's HTTP side (docs/design.md §3):
// Handler serves a lockserver.Coordinator's API (the endpoints of §3 and §8,
// /healthz, /readyz and /metrics) over fasthttp, and turns the lock
// manager's errors into HTTP statuses and JSON error codes at this edge.
//
// It owns what only HTTP needs: the event streams of waiting requests,
// which take their connection over (§3.11); authentication and node
// identity by shared token, node tokens or client certificate (§9); the
// listener that bounds connections before anything else is read, and the
// bounds on event streams (§9). Open checks the data directory, opens the
// database and returns a Server, a stand-alone or embedded coordinator,
// ready to serve; RegisterFlags binds a Config to command-line flags, so
// that every daemon spells its options the same way.
package httpserver
