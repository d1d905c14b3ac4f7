// Package failpoint names the places where a process may die in the middle
// of a write, a delete, a sync, an adopt or a forget (docs/design.md
// §8.16), so that a test can stop the real process there.
//
// Inject(name) does nothing unless the binary is built with the build tag
// `failpoints`; without it Inject is an empty function the compiler inlines
// away. With the tag, the environment variable SHAREDCONTENT_FAILPOINTS
// arms points, read once at start:
//
//	SHAREDCONTENT_FAILPOINTS="store/write/after-rename=exit;coord/sync/after-replace=sleep(500)"
//
// Actions: exit (os.Exit(ExitCode) at once, no deferred function runs: as
// a kill -9 at that point, after a line on stderr naming the point), panic,
// sleep(ms), off. An unparsable value stops the process at start.
//
// The point names are the constants of names.go; every call site uses one.
package failpoint
