package logbuf

import (
	"os"
	"sync"
	"testing"

	"github.com/containerd/log"
)

// ShowEnv, set to 1, keeps the global logger writing where it writes
// (stderr): every test's logs are shown, passing or not.
const ShowEnv = "SHAREDCONTENT_TEST_LOGS"

// showing is the test whose logs ShowOnFailure holds now: a second call
// from the same test (two harnesses of one test) keeps the one buffer.
var showing struct {
	mu sync.Mutex
	t  testing.TB
	b  *Buffer // t's
}

// ShowOnFailure holds what log.L writes while t runs (its cleanups
// included, those registered after this call) and logs it with t.Log when
// t has failed; a passing test's daemon logs are dropped, so a failure is
// not buried in them. The harnesses that start coordinators and nodes in
// process call it first. A test that already captures log.L to assert on
// its lines (Capture) keeps its buffer. The tests of one package run one
// at a time (none calls t.Parallel), so the one global logger is theirs.
func ShowOnFailure(t testing.TB) {
	t.Helper()
	if os.Getenv(ShowEnv) == "1" {
		return
	}
	showing.mu.Lock()
	defer showing.mu.Unlock()
	if showing.t == t {
		return
	}
	if b, captured := log.L.Logger.Out.(*Buffer); captured && b != showing.b {
		return
	}
	prevT, prevB := showing.t, showing.b
	b := Capture(t)
	showing.t, showing.b = t, b
	t.Cleanup(func() {
		showing.mu.Lock()
		showing.t, showing.b = prevT, prevB
		showing.mu.Unlock()
		if t.Failed() {
			t.Logf("what the logger wrote during this test (shown because it failed; %s=1 shows it always):\n%s", ShowEnv, b.String())
		}
	})
}
