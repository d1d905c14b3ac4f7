// Package logbuf captures what containerd/log's global logger writes, for
// tests that assert on log lines.
package logbuf
