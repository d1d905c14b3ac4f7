// Package lockservertest starts real coordinators for tests: Start serves
// one over loopback HTTP (or HTTPS, with mTLS and node identity) on a
// temporary data directory until the test ends, and a fault test can Stop,
// Restart and Wipe it; NewCoordinator is an embedded coordinator with in-memory
// storage; ServeHandler serves a bare Handler; FreeAddr gives an address
// for a coordinator that is not up yet (docs/design.md §4).
//
// The tests of lockclient, contentv2 and its adapter, plugin/builtin,
// cmd/sharedcontentctl and integration use it. lockserver's own internal
// tests cannot (this package imports lockserver) and keep helpers that
// reach unexported state; integration/e2e runs the real binaries.
//
// Everything fails the test (require) rather than returning an error, and
// everything it starts is stopped by t.Cleanup.
package lockservertest
