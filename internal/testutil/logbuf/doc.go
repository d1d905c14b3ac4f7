// Package logbuf captures what containerd/log's global logger writes, for
// tests that assert on log lines (Capture), and for tests that run daemons
// in process, whose logs are shown only when the test fails
// (ShowOnFailure).
package logbuf
