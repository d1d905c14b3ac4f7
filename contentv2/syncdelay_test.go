package contentv2

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestSyncAfterRestartIsDeferred: the round that learns of a coordinator
// restart renews the session but does not sync; the sync follows on its
// own and completes.
func TestSyncAfterRestartIsDeferred(t *testing.T) {
	c := newFakeCluster(3 * time.Second) // rounds every second
	s := fakeStore(t, c, t.TempDir(), "node-1")
	before := len(calls(c.recorded(), "SyncRefs"))
	c.restart()
	renewal := kick(t, s, c)
	require.False(t, renewal.Answer.Synced)
	log := c.await(t, "the deferred sync", func(log []fakeCall) bool { return len(calls(log, "SyncRefs")) > before })
	require.NoError(t, calls(log, "SyncRefs")[before].Err)
	require.Eventually(t, func() bool {
		s.smu.Lock()
		defer s.smu.Unlock()
		return s.synced
	}, time.Minute, 10*time.Millisecond)
}

// TestSyncDelayRule: the sync asked for after a restart waits until a
// random point of the next renewal interval (TTL/3 from the answer), and
// the session loop's next round comes no later than that point.
func TestSyncDelayRule(t *testing.T) {
	c := newFakeCluster(longTTL) // no regular round during the test
	s := fakeStore(t, c, t.TempDir(), "node-1")
	interval := s.coordTTL() / 3
	for range 100 {
		s.smu.Lock()
		s.restarted = true
		s.smu.Unlock()
		now := time.Now()
		deferred := s.deferSync(now)
		s.smu.Lock()
		syncAt := s.syncAt
		s.smu.Unlock()
		if !deferred { // drew a delay of 0
			require.True(t, syncAt.IsZero())
			continue
		}
		require.False(t, syncAt.Before(now), "not before the answer")
		require.True(t, syncAt.Before(now.Add(interval)), "within one renewal interval: %s after", syncAt.Sub(now))
		asked := time.Now()
		require.LessOrEqual(t, s.nextRound(), max(syncAt.Sub(asked), time.Millisecond), "the next round comes by then")
		require.True(t, s.deferSync(syncAt.Add(-time.Nanosecond)), "still waiting just before")
		require.False(t, s.deferSync(syncAt), "due at that point")
		s.smu.Lock()
		require.True(t, s.syncAt.IsZero(), "and no longer deferred")
		s.smu.Unlock()
	}
}
