package httpserver

import (
	"context"
	"errors"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sharedcontent/sharedcontent/lockserver/api"
)

// TestExpireRefusals: POST /nodes/{id}/expire forgets only a member that
// is not live, absent for node_expiry of the coordinator's uptime, and
// whose marker the reaper has reported in one state for node_expiry of the
// coordinator's uptime; and only the reap lock's holder (with its live
// lease) or an admin may ask.
func TestExpireRefusals(t *testing.T) {
	dir := t.TempDir()
	tokens := filepath.Join(dir, "tokens")
	writeFile(t, tokens, "n1 tok1\nn2 tok2\nn3 tok3\n")
	writeFile(t, filepath.Join(dir, "admin"), "adm\n")
	const expiry = 100 * time.Millisecond
	ts := startServer(t, filepath.Join(dir, "data"), func(c *Config) {
		c.NodeTokensFile, c.AdminTokenFile = tokens, filepath.Join(dir, "admin")
		c.SessionTTL, c.NodeExpiry = 20*time.Millisecond, expiry
		c.Reapers = []string{"n1"}
	})
	l := ts.Coordinator
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
	long := api.ExpireRequest{MarkerUnchangedMs: 10 * expiry.Milliseconds(), Marker: "m1"}

	// n3 references the blob: within its session, which lasts 20 ms, so
	// a loaded machine may need the node's own remedy, open it again and
	// retry (docs/design.md §8.4).
	require.Eventually(t, func() bool {
		_, err := l.Session(ctx, api.SessionRequest{NodeID: "n3"})
		require.NoError(t, err)
		_, err = l.AddRef(ctx, blob, "n3")
		require.True(t, err == nil || errors.Is(err, api.ErrNoSession), "%v", err)
		return err == nil
	}, 5*time.Second, time.Millisecond)
	lease := reapLease(t, l, "n1")
	reaper := long
	reaper.NodeID, reaper.LeaseID = "n1", lease
	require.Eventually(t, func() bool { return absentMs(t, l, "n3") >= expiry.Milliseconds() }, 5*time.Second, 5*time.Millisecond)

	// Absent long enough; the reaper claims the marker unchanged for ten
	// expiries, but the coordinator has its first report of it only now.
	status, e := expire("n3", "tok1", reaper)
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

	// The marker changed: the measure starts again from this report. The
	// reaper reports it until the coordinator's own measure reaches the
	// expiry.
	changed := reaper
	changed.Marker = "m2"
	first := time.Now()
	status, _ = expire("n3", "tok1", changed)
	require.Equal(t, http.StatusConflict, status)
	var resp api.ExpireResponse
	require.Eventually(t, func() bool {
		status, body := post(t, ts.url, "/nodes/n3/expire", changed, "Authorization", "Bearer tok1")
		if status == http.StatusOK {
			resp = decodeAs[api.ExpireResponse](t, body)
		}
		return status == http.StatusOK
	}, 5*time.Second, 5*time.Millisecond)
	require.GreaterOrEqual(t, resp.MarkerUnchangedMs, expiry.Milliseconds(), "the coordinator's measure")
	require.GreaterOrEqual(t, time.Since(first), time.Duration(resp.MarkerUnchangedMs)*time.Millisecond, "measured from the first report of the state")
	require.Equal(t, int64(-1), absentMs(t, l, "n3"), "n3 is no member")
	require.Empty(t, refsOf(t, l, blob))

	// An admin may too (no lease, its figure taken); an unknown member is 404.
	session(t, l, "n2")
	require.Eventually(t, func() bool { return absentMs(t, l, "n2") >= expiry.Milliseconds() }, 5*time.Second, 5*time.Millisecond)
	status, e = expire("n2", "adm", long)
	require.Equal(t, http.StatusOK, status, e.Error)
	status, _ = expire("n2", "adm", long)
	require.Equal(t, http.StatusNotFound, status)
}
