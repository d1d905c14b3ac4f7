package lockserver

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sharedcontent/sharedcontent/lockserver/api"
)

// The coordinator's records behind the reaper's conditions (reap.go).

// testClock is a Coordinator's clock that a test moves forward: the real
// (monotonic) clock plus a skew.
type testClock struct{ skew atomic.Int64 }

func (c *testClock) now() time.Time { return time.Now().Add(time.Duration(c.skew.Load())) }

func (c *testClock) advance(d time.Duration) { c.skew.Add(int64(d)) }

// TestReapActivityBounded: the coordinator remembers at most its bound of
// recent resources per shard; past it, every resource of the shard counts
// as active now (nothing is reaped early), and the sweep forgets what is
// older than the grace.
func TestReapActivityBounded(t *testing.T) {
	clock := &testClock{}
	cfg := DefaultConfig()
	cfg.Shards = maxRecentResources / 1024 // a bound of 1024 per shard
	l, err := newCoordinator(cfg, Options{Refs: newTestRefs()}, clock.now)
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	sh := l.shards[0]
	limit := max(1024, maxRecentResources/len(l.shards))
	sh.mu.Lock()
	for i := range limit {
		l.noteActivity(sh, fmt.Sprintf("r%d", i), clock.now())
	}
	require.Len(t, sh.recent, limit)
	floor := sh.recentFloor
	l.noteActivity(sh, "one-more", clock.now())
	require.Empty(t, sh.recent, "over the bound, the map is dropped")
	require.Greater(t, sh.recentFloor, floor, "and every resource counts as active now")
	require.Equal(t, sh.recentFloor, sh.lastActivity("never-seen"))
	l.noteActivity(sh, "later", clock.now())
	sh.mu.Unlock()

	clock.advance(cfg.ReapGrace)
	l.sweep(sh, clock.now())
	sh.mu.Lock()
	defer sh.mu.Unlock()
	require.Empty(t, sh.recent, "the sweep forgot activity older than the grace")
}

// TestReapLockHolderRecord: the reaper's record follows the reap lock's
// grant through grant, keepalive and release, and ignores other keys.
func TestReapLockHolderRecord(t *testing.T) {
	l := newTestCoordinator(t)
	ctx := context.Background()
	other, err := l.Lock(ctx, api.LockRequest{Type: api.OperationUpdate, ResourceID: "sharedcontent/other", NodeID: "n1"})
	require.NoError(t, err)
	require.True(t, other.Acquired)
	require.Nil(t, l.reaper.Load(), "another update lock is not the reaper's")

	g, err := l.Lock(ctx, api.LockRequest{Type: api.OperationUpdate, ResourceID: api.ReapLockResource, NodeID: "n1"})
	require.NoError(t, err)
	h := l.reaper.Load()
	require.NotNil(t, h)
	require.Equal(t, "n1", h.node)
	require.Equal(t, g.LeaseID, h.leaseID)

	_, err = l.Keepalive(ctx, api.KeepaliveRequest{Type: api.OperationUpdate, ResourceID: api.ReapLockResource, LeaseID: g.LeaseID})
	require.NoError(t, err)
	require.False(t, l.reaper.Load().expires.Before(h.expires), "a keepalive extends the record")

	_, err = l.Unlock(ctx, api.UnlockRequest{Type: api.OperationUpdate, ResourceID: api.ReapLockResource, LeaseID: g.LeaseID, Success: true})
	require.NoError(t, err)
	require.Nil(t, l.reaper.Load(), "released: nobody is the reaper")
}
