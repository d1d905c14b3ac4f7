package lockserver

import (
	"context"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sharedcontent/sharedcontent/lockserver/api"
)

// absentMs is the member's absence as GET /nodes reports it, or -1.
func absentMs(t *testing.T, l *Locker, node string) int64 {
	t.Helper()
	nodes, err := l.Nodes(context.Background())
	require.NoError(t, err)
	for _, n := range nodes.Nodes {
		if n.NodeID == node {
			return n.AbsentMs
		}
	}
	return -1
}

// reapLease takes the reap lock for node and returns its lease ID.
func reapLease(t *testing.T, l *Locker, node string) string {
	t.Helper()
	resp, err := l.Lock(context.Background(), api.LockRequest{Type: api.OperationUpdate, ResourceID: api.ReapLockResource, NodeID: node})
	require.NoError(t, err)
	require.True(t, resp.Acquired)
	return resp.LeaseID
}

// TestNoExpiryByTimeAlone (issue 23, scenarios 1 and 2): the coordinator
// forgets nobody by itself, however long a member has been away; the
// member's absence is reported in the coordinator's uptime.
func TestNoExpiryByTimeAlone(t *testing.T) {
	const expiry = 50 * time.Millisecond
	l := newTestLocker(t, func(c *Config) { c.SessionTTL = 20 * time.Millisecond; c.NodeExpiry = expiry })
	session(t, l, "n1")
	_, err := l.AddRef(context.Background(), blob, "n1")
	require.NoError(t, err)
	require.Eventually(t, func() bool { return absentMs(t, l, "n1") >= 4*expiry.Milliseconds() },
		10*time.Second, 5*time.Millisecond, "n1 away for four node expiries")
	require.Equal(t, []string{"n1"}, refsOf(t, l, blob), "time alone forgot a member")
	nodes, err := l.Nodes(context.Background())
	require.NoError(t, err)
	require.Equal(t, expiry.Milliseconds(), nodes.NodeExpiryMs)
}

// TestAbsenceCountsOnlyUptime (issue 23, scenario 2): a member's absence
// starts again at a coordinator restart, however long it was down.
func TestAbsenceCountsOnlyUptime(t *testing.T) {
	dir := t.TempDir()
	const expiry = time.Second
	cfg := func(c *ServerConfig) { c.SessionTTL = 20 * time.Millisecond; c.NodeExpiry = expiry }
	ts := startServer(t, dir, cfg)
	session(t, ts.Locker, "n1")
	ts.Stop()
	time.Sleep(2 * expiry) // the outage (a weekend), longer than node_expiry
	beforeStart := time.Now()
	ts = startServer(t, dir, cfg)
	absent := absentMs(t, ts.Locker, "n1")
	_, err := ts.Locker.Expire(context.Background(), "n1", api.ExpireRequest{MarkerUnchangedMs: time.Hour.Milliseconds()})
	uptime := time.Since(beforeStart) // at least the coordinator's uptime
	require.NotEqual(t, int64(-1), absent, "n1 is still a member")
	require.LessOrEqual(t, absent, uptime.Milliseconds(), "absence counts from the restart, not from n1's last session")
	if uptime < expiry {
		require.ErrorIs(t, err, api.ErrNotExpired, "the outage counted as absence")
	}
}

// TestExpireRefusesLiveMember: a member with a live session is not
// expired, whatever the reaper reports (409 member_live over HTTP).
func TestExpireRefusesLiveMember(t *testing.T) {
	l := newTestLocker(t, func(c *Config) { c.SessionTTL, c.NodeExpiry = time.Hour, time.Hour })
	session(t, l, "n3")
	_, err := l.Expire(context.Background(), "n3", api.ExpireRequest{MarkerUnchangedMs: (2 * time.Hour).Milliseconds()})
	require.ErrorIs(t, err, api.ErrMemberLive)
	status, _ := api.HTTPStatus(err)
	require.Equal(t, http.StatusConflict, status)
	require.True(t, nodeLive(t, l, "n3"), "n3 is still a live member")
}

// TestExpireRefusesShortAbsence: a member unheard of for less than
// node_expiry of the coordinator's uptime is not expired, whatever the
// reaper reports of its marker.
func TestExpireRefusesShortAbsence(t *testing.T) {
	l := newTestLocker(t, func(c *Config) { c.SessionTTL, c.NodeExpiry = 20*time.Millisecond, time.Hour })
	session(t, l, "n3")
	require.Eventually(t, func() bool { return !nodeLive(t, l, "n3") }, 5*time.Second, 5*time.Millisecond)
	_, err := l.Expire(context.Background(), "n3", api.ExpireRequest{MarkerUnchangedMs: (2 * time.Hour).Milliseconds()})
	require.ErrorIs(t, err, api.ErrNotExpired)
	require.Contains(t, err.Error(), "uptime")
	require.NotEqual(t, int64(-1), absentMs(t, l, "n3"), "n3 is still a member")
}

// TestExpireRefusals: POST /nodes/{id}/expire forgets only a member that
// is not live, absent for node_expiry of the coordinator's uptime, and
// whose marker the caller saw unchanged that long; and only the reap
// lock's holder (with its live lease) or an admin may ask.
func TestExpireRefusals(t *testing.T) {
	dir := t.TempDir()
	tokens := filepath.Join(dir, "tokens")
	writeFile(t, tokens, "n1 tok1\nn2 tok2\nn3 tok3\n")
	writeFile(t, filepath.Join(dir, "admin"), "adm\n")
	const expiry = 100 * time.Millisecond
	ts := startServer(t, filepath.Join(dir, "data"), func(c *ServerConfig) {
		c.NodeTokensFile, c.AdminTokenFile = tokens, filepath.Join(dir, "admin")
		c.SessionTTL, c.NodeExpiry = 20*time.Millisecond, expiry
	})
	l := ts.Locker
	ctx := context.Background()
	expire := func(node, auth string, req api.ExpireRequest) (int, api.ErrorResponse) {
		t.Helper()
		status, body := post(t, ts.url, "/nodes/"+node+"/expire", req, "Authorization", "Bearer "+auth)
		var e api.ErrorResponse
		if status != http.StatusOK {
			e = decodeAs[api.ErrorResponse](t, body)
		}
		return status, e
	}
	long := api.ExpireRequest{MarkerUnchangedMs: 10 * expiry.Milliseconds()}

	session(t, l, "n3")
	_, err := l.AddRef(ctx, blob, "n3")
	require.NoError(t, err)
	lease := reapLease(t, l, "n1")
	reaper := long
	reaper.NodeID, reaper.LeaseID = "n1", lease
	require.Eventually(t, func() bool { return absentMs(t, l, "n3") >= expiry.Milliseconds() }, 5*time.Second, 5*time.Millisecond)

	// Absent long enough, but the marker was seen unchanged too briefly.
	short := reaper
	short.MarkerUnchangedMs = expiry.Milliseconds() - 1
	status, e := expire("n3", "tok1", short)
	require.Equal(t, http.StatusConflict, status)
	require.Equal(t, api.CodeNotExpired, e.Code)
	require.Contains(t, e.Error, "marker")

	// Callers that are not the reaper: 403.
	other := long
	other.NodeID, other.LeaseID = "n2", lease // n1's lease claimed by n2
	status, e = expire("n3", "tok2", other)
	require.Equal(t, http.StatusForbidden, status, e.Error)
	require.Contains(t, e.Error, "reaper")
	status, _ = expire("n3", "tok2", reaper) // n2 acting as n1
	require.Equal(t, http.StatusForbidden, status)
	status, e = expire("n3", "tok2", long) // no lease, not an admin
	require.Equal(t, http.StatusForbidden, status, e.Error)
	wrong := reaper
	wrong.LeaseID = "0123456789abcdef0123456789abcdef"
	status, _ = expire("n3", "tok1", wrong) // the holder, with another lease
	require.Equal(t, http.StatusForbidden, status)
	require.Equal(t, []string{"n3"}, refsOf(t, l, blob), "no refusal changed anything")
	require.NotEqual(t, int64(-1), absentMs(t, l, "n3"))

	// The reaper, with both measures long enough.
	status, e = expire("n3", "tok1", reaper)
	require.Equal(t, http.StatusOK, status, e.Error)
	require.Equal(t, int64(-1), absentMs(t, l, "n3"), "n3 is no member")
	require.Empty(t, refsOf(t, l, blob))

	// An admin may too (no lease); an unknown member is 404.
	session(t, l, "n2")
	require.Eventually(t, func() bool { return absentMs(t, l, "n2") >= expiry.Milliseconds() }, 5*time.Second, 5*time.Millisecond)
	status, e = expire("n2", "adm", long)
	require.Equal(t, http.StatusOK, status, e.Error)
	status, _ = expire("n2", "adm", long)
	require.Equal(t, http.StatusNotFound, status)
}

// TestExpireNeedsLiveReapLease: a lease that lapsed is no proof of being
// the reaper.
func TestExpireNeedsLiveReapLease(t *testing.T) {
	l := newTestLocker(t, func(c *Config) {
		c.SessionTTL, c.NodeExpiry, c.LeaseTTL = 20*time.Millisecond, 20*time.Millisecond, 50*time.Millisecond
	})
	session(t, l, "n3")
	lease := reapLease(t, l, "n1")
	require.Eventually(t, func() bool { return absentMs(t, l, "n3") >= 20 }, 5*time.Second, 5*time.Millisecond)
	require.Eventually(t, func() bool {
		st, err := l.Status(context.Background(), api.OperationUpdate, api.ReapLockResource, "", "")
		return err == nil && st.Holder == nil
	}, 5*time.Second, 5*time.Millisecond, "the reap lease lapses")
	_, err := l.Expire(context.Background(), "n3", api.ExpireRequest{NodeID: "n1", LeaseID: lease, MarkerUnchangedMs: 1000})
	require.ErrorIs(t, err, api.ErrForbidden)
	require.NotEqual(t, int64(-1), absentMs(t, l, "n3"))
}

func nodeLive(t *testing.T, l *Locker, node string) bool {
	t.Helper()
	nodes, err := l.Nodes(context.Background())
	require.NoError(t, err)
	for _, n := range nodes.Nodes {
		if n.NodeID == node {
			return n.Live
		}
	}
	return false
}
