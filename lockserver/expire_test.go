package lockserver

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sharedcontent/sharedcontent/lockserver/api"
)

// absentMs is the member's absence as GET /nodes reports it, or -1.
func absentMs(t *testing.T, c *Coordinator, node string) int64 {
	t.Helper()
	nodes, err := c.Nodes(context.Background())
	require.NoError(t, err)
	for _, n := range nodes.Nodes {
		if n.NodeID == node {
			return n.AbsentMs
		}
	}
	return -1
}

// reapLease takes the reap lock for node and returns its lease ID.
func reapLease(t *testing.T, c *Coordinator, node string) string {
	t.Helper()
	resp, err := c.Lock(context.Background(), api.LockRequest{Type: api.OperationUpdate, ResourceID: api.ReapLockResource, NodeID: node})
	require.NoError(t, err)
	require.True(t, resp.Acquired)
	return resp.LeaseID
}

// TestNoExpiryByTimeAlone (docs/design.md §8.4): the coordinator
// forgets nobody by itself, however long a member has been away; the
// member's absence is reported in the coordinator's uptime.
func TestNoExpiryByTimeAlone(t *testing.T) {
	const expiry = 50 * time.Millisecond
	coord := newTestCoordinator(t, func(c *Config) { c.SessionTTL = 20 * time.Millisecond; c.NodeExpiry = expiry })
	session(t, coord, "n1")
	_, err := coord.AddRef(context.Background(), blob, "n1")
	require.NoError(t, err)
	require.Eventually(t, func() bool { return absentMs(t, coord, "n1") >= 4*expiry.Milliseconds() },
		10*time.Second, 5*time.Millisecond, "n1 away for four node expiries")
	require.Equal(t, []string{"n1"}, refsOf(t, coord, blob), "time alone forgot a member")
	nodes, err := coord.Nodes(context.Background())
	require.NoError(t, err)
	require.Equal(t, expiry.Milliseconds(), nodes.NodeExpiryMs)
}

// TestExpireRefusesLiveMember: a member with a live session is not
// expired, whatever the reaper reports (409 member_live over HTTP).
func TestExpireRefusesLiveMember(t *testing.T) {
	coord := newTestCoordinator(t, func(c *Config) { c.SessionTTL, c.NodeExpiry = time.Hour, time.Hour })
	session(t, coord, "n3")
	_, err := coord.Expire(context.Background(), "n3", api.ExpireRequest{MarkerUnchangedMs: (2 * time.Hour).Milliseconds()})
	require.ErrorIs(t, err, api.ErrMemberLive)
	require.True(t, nodeLive(t, coord, "n3"), "n3 is still a live member")
}

// TestExpireRefusesShortAbsence: a member unheard of for less than
// node_expiry of the coordinator's uptime is not expired, whatever the
// reaper reports of its marker.
func TestExpireRefusesShortAbsence(t *testing.T) {
	coord := newTestCoordinator(t, func(c *Config) { c.SessionTTL, c.NodeExpiry = 20*time.Millisecond, time.Hour })
	session(t, coord, "n3")
	require.Eventually(t, func() bool { return !nodeLive(t, coord, "n3") }, 5*time.Second, 5*time.Millisecond)
	_, err := coord.Expire(context.Background(), "n3", api.ExpireRequest{MarkerUnchangedMs: (2 * time.Hour).Milliseconds()})
	require.ErrorIs(t, err, api.ErrNotExpired)
	require.Contains(t, err.Error(), "uptime")
	require.NotEqual(t, int64(-1), absentMs(t, coord, "n3"), "n3 is still a member")
}

// TestExpireNeedsLiveReapLease: a lease that lapsed is no proof of being
// the reaper.
func TestExpireNeedsLiveReapLease(t *testing.T) {
	coord := newTestCoordinator(t, func(c *Config) {
		c.SessionTTL, c.NodeExpiry, c.LeaseTTL = 20*time.Millisecond, 20*time.Millisecond, 50*time.Millisecond
	})
	session(t, coord, "n3")
	lease := reapLease(t, coord, "n1")
	require.Eventually(t, func() bool { return absentMs(t, coord, "n3") >= 20 }, 5*time.Second, 5*time.Millisecond)
	require.Eventually(t, func() bool {
		st, err := coord.Status(context.Background(), api.OperationUpdate, api.ReapLockResource, "", "")
		return err == nil && st.Holder == nil
	}, 5*time.Second, 5*time.Millisecond, "the reap lease lapses")
	_, err := coord.Expire(context.Background(), "n3", api.ExpireRequest{NodeID: "n1", LeaseID: lease, MarkerUnchangedMs: 1000})
	require.ErrorIs(t, err, api.ErrForbidden)
	require.NotEqual(t, int64(-1), absentMs(t, coord, "n3"))
}

func nodeLive(t *testing.T, c *Coordinator, node string) bool {
	t.Helper()
	nodes, err := c.Nodes(context.Background())
	require.NoError(t, err)
	for _, n := range nodes.Nodes {
		if n.NodeID == node {
			return n.Live
		}
	}
	return false
}

// TestAbsenceCountsOnlyUptime (docs/design.md §8.4): a member's absence
// starts again at a coordinator restart, however long it was down.
func TestAbsenceCountsOnlyUptime(t *testing.T) {
	dir := t.TempDir()
	const expiry = time.Second
	cfg := func(c *Config) { c.SessionTTL = 20 * time.Millisecond; c.NodeExpiry = expiry }
	ts := startStored(t, dir, cfg)
	session(t, ts.Coordinator, "n1")
	ts.Stop()
	time.Sleep(2 * expiry) // the outage (a weekend), longer than node_expiry
	beforeStart := time.Now()
	ts = startStored(t, dir, cfg)
	absent := absentMs(t, ts.Coordinator, "n1")
	_, err := ts.Coordinator.Expire(context.Background(), "n1", api.ExpireRequest{MarkerUnchangedMs: time.Hour.Milliseconds()})
	uptime := time.Since(beforeStart) // at least the coordinator's uptime
	require.NotEqual(t, int64(-1), absent, "n1 is still a member")
	require.LessOrEqual(t, absent, uptime.Milliseconds(), "absence counts from the restart, not from n1's last session")
	if uptime < expiry {
		require.ErrorIs(t, err, api.ErrNotExpired, "the outage counted as absence")
	}
}
