// Package lockservertest starts coordinators for tests: a real
// httpserver.Server on a temp data directory, served over loopback HTTP
// (or HTTPS, with mTLS) until the test ends, that a fault test can stop,
// restart and wipe (Start); an in-memory Locker for the embedded mode
// (NewLocker); a bare Handler on loopback (ServeHandler); and a free
// address for a coordinator that is not up yet (FreeAddr).
//
// Every package's tests start their coordinators here, except
// lockserver's own: its internal tests cannot import this package (it
// imports lockserver), so they keep helpers that reach unexported state;
// and integration/e2e, which runs the sharedcontent-lockserver binary.
//
// Everything fails the test (require) rather than returning an error, and
// everything it starts is stopped by t.Cleanup.
package lockservertest
