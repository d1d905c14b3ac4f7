// Package httpserver is the coordinator's HTTP side: the API that
// lockclient speaks (Handler, with Server-Sent Events for lock events),
// its authentication (shared token, node tokens, client certificates), the
// connection and event-stream limits, and Server, which opens the data
// directory, starts a lockserver.Locker on it and serves it
// (docs/design.md, "HTTP stack").
//
// Open starts a stand-alone or embedded coordinator from a Config;
// RegisterFlags binds a Config to command-line flags, so that every daemon
// spells its options the same way.
package httpserver
