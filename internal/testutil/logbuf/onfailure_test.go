package logbuf

import (
	"fmt"
	"testing"

	"github.com/containerd/log"
	"github.com/stretchr/testify/require"
)

// recorder is a testing.TB whose failure the test sets, whose Logf is
// recorded, and whose cleanups run when the test calls finish.
type recorder struct {
	testing.TB
	failed   bool
	logged   []string
	cleanups []func()
}

func (r *recorder) Helper()          {}
func (r *recorder) Failed() bool     { return r.failed }
func (r *recorder) Cleanup(f func()) { r.cleanups = append(r.cleanups, f) }
func (r *recorder) Logf(format string, args ...any) {
	r.logged = append(r.logged, fmt.Sprintf(format, args...))
}
func (r *recorder) finish() {
	for i := len(r.cleanups) - 1; i >= 0; i-- {
		r.cleanups[i]()
	}
}

func TestShowOnFailure(t *testing.T) {
	t.Setenv(ShowEnv, "")
	out := log.L.Logger.Out
	for _, failed := range []bool{false, true} {
		r := &recorder{TB: t}
		ShowOnFailure(r)
		ShowOnFailure(r) // a second harness of the same test keeps the buffer
		log.L.WithField("failed", failed).Info("daemon line")
		r.failed = failed
		r.finish()
		require.Equal(t, out, log.L.Logger.Out, "the logger writes where it did before the test")
		if !failed {
			require.Empty(t, r.logged, "a passing test's logs are dropped")
			continue
		}
		require.Len(t, r.logged, 1, "a failing test logs what the logger wrote, once")
		require.Contains(t, r.logged[0], "daemon line")
		require.Contains(t, r.logged[0], "failed=true")
	}
}

// A test that captures the logger to assert on its lines keeps its
// buffer.
func TestShowOnFailureKeepsCapture(t *testing.T) {
	t.Setenv(ShowEnv, "")
	b := Capture(t)
	r := &recorder{TB: t, failed: true}
	ShowOnFailure(r)
	log.L.Info("asserted line")
	r.finish()
	require.Contains(t, b.String(), "asserted line")
	require.Empty(t, r.logged)
}
