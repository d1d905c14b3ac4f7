package contentv2

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestSyncAfterRestartIsSpread: the round that learns of a coordinator
// restart renews the session but does not sync; the sync follows on its
// own, at a random point of the next renewal interval, before the next
// regular renewal.
func TestSyncAfterRestartIsSpread(t *testing.T) {
	c := newFakeCluster(3 * time.Second) // rounds every second
	s := fakeStore(t, c, t.TempDir(), "node-1")
	before := len(calls(c.recorded(), "SyncRefs"))
	c.restart()
	learned := time.Now()
	renewal := kick(t, s, c)
	require.False(t, renewal.Answer.Synced)
	require.Len(t, calls(c.recorded(), "SyncRefs"), before, "not at once")
	s.smu.Lock()
	syncAt := s.syncAt
	s.smu.Unlock()
	require.False(t, syncAt.IsZero(), "the sync is deferred")
	require.LessOrEqual(t, syncAt.Sub(learned), time.Second, "within one renewal interval")
	log := c.await(t, "the deferred sync", func(log []fakeCall) bool { return len(calls(log, "SyncRefs")) > before })
	require.NoError(t, calls(log, "SyncRefs")[before].Err)
	require.Eventually(t, func() bool {
		s.smu.Lock()
		defer s.smu.Unlock()
		return s.synced
	}, time.Minute, 10*time.Millisecond)
}
