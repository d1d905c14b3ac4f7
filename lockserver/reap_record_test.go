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
	c, err := newCoordinator(cfg, Options{Refs: newTestRefs()}, clock.now)
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	rs := c.references
	st := rs.stripes[0]
	limit := max(1024, maxRecentResources/len(rs.stripes))
	// ids returns n resource IDs of stripe 0 with the prefix.
	ids := func(prefix string, n int) []string {
		var out []string
		for i := 0; len(out) < n; i++ {
			if id := fmt.Sprintf("%s%d", prefix, i); shardIndex(id, len(rs.stripes)) == 0 {
				out = append(out, id)
			}
		}
		return out
	}
	for _, id := range ids("r", limit) {
		rs.noteActivity(id, clock.now())
	}
	require.Len(t, st.recent, limit)
	floor := st.recentFloor
	rs.noteActivity(ids("one-more", 1)[0], clock.now())
	require.Empty(t, st.recent, "over the bound, the map is dropped")
	require.Greater(t, st.recentFloor, floor, "and every resource counts as active now")
	require.Equal(t, st.recentFloor, rs.lastActivity(ids("never-seen", 1)[0]))
	rs.noteActivity(ids("later", 1)[0], clock.now())

	clock.advance(cfg.ReapGrace)
	c.locks.sweep(0, clock.now())
	st.mu.Lock()
	defer st.mu.Unlock()
	require.Empty(t, st.recent, "the sweep forgot activity older than the grace")
}

// TestReapLockHolderRecord: the reaper's record follows the reap lock's
// grant through grant, keepalive and release, and ignores other keys.
func TestReapLockHolderRecord(t *testing.T) {
	c := newTestCoordinator(t)
	ctx := context.Background()
	other, err := c.Lock(ctx, api.LockRequest{Type: api.OperationUpdate, ResourceID: "sharedcontent/other", NodeID: "n1"})
	require.NoError(t, err)
	require.True(t, other.Acquired)
	require.Nil(t, c.locks.reaper(), "another update lock is not the reaper's")

	g, err := c.Lock(ctx, api.LockRequest{Type: api.OperationUpdate, ResourceID: api.ReapLockResource, NodeID: "n1"})
	require.NoError(t, err)
	h := c.locks.reaper()
	require.NotNil(t, h)
	require.Equal(t, "n1", h.node)
	require.Equal(t, g.LeaseID, h.leaseID)

	_, err = c.Keepalive(ctx, api.KeepaliveRequest{Type: api.OperationUpdate, ResourceID: api.ReapLockResource, LeaseID: g.LeaseID})
	require.NoError(t, err)
	require.False(t, c.locks.reaper().expires.Before(h.expires), "a keepalive extends the record")

	_, err = c.Unlock(ctx, api.UnlockRequest{Type: api.OperationUpdate, ResourceID: api.ReapLockResource, LeaseID: g.LeaseID, Success: true})
	require.NoError(t, err)
	require.Nil(t, c.locks.reaper(), "released: nobody is the reaper")
}
