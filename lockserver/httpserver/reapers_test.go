package httpserver

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sharedcontent/sharedcontent/lockserver/api"
)

// Who may reap (docs/design.md §8.12), over HTTP with node tokens: only a
// designated reaper takes the reap lock, a dangling reap drops only the
// reaper's own reference, one hold of the lock is bounded, and expiry
// rests on the coordinator's own measures.

// TestReapLockOnlyDesignated: node-c, authenticated by its own token,
// took the reap lock (200) and so could reap and expire. Now only a node
// --reapers names, or the admin, may; with node identities and no
// --reapers, no node; without node identities and no --reapers, any.
func TestReapLockOnlyDesignated(t *testing.T) {
	p := startPeers(t, func(c *Config) { c.Reapers = []string{"node-a"} })
	code, body := p.lockAs(t, "node-c", api.OperationUpdate, api.ReapLockResource, "")
	requireCode(t, http.StatusForbidden, api.CodeForbidden, code, body)
	msg := decodeAs[api.ErrorResponse](t, body).Error
	require.Contains(t, msg, "node node-c is not a designated reaper")
	require.Contains(t, msg, "--reapers node-a")
	st, err := p.Coordinator.Status(context.Background(), api.OperationUpdate, api.ReapLockResource, "", "")
	require.NoError(t, err)
	require.Nil(t, st.Holder, "the refused request holds nothing")
	require.Zero(t, st.QueueLength, "nor waits for it")
	// node-c cannot act as node-a to get round it.
	code, body = p.call(t, "node-c", http.MethodPost, "/lock", nil,
		api.LockRequest{Type: api.OperationUpdate, ResourceID: api.ReapLockResource, NodeID: "node-a"})
	requireCode(t, http.StatusForbidden, api.CodeForbidden, code, body)

	lease := p.acquire(t, "node-a", api.OperationUpdate, api.ReapLockResource, "")
	p.unlock(t, "node-a", api.OperationUpdate, api.ReapLockResource, lease, true)
	lease = p.acquire(t, "admin", api.OperationUpdate, api.ReapLockResource, "")
	p.unlock(t, "admin", api.OperationUpdate, api.ReapLockResource, lease, true)

	// Node identities and no --reapers: nobody but the admin.
	p = startPeers(t)
	code, body = p.lockAs(t, "node-a", api.OperationUpdate, api.ReapLockResource, "")
	requireCode(t, http.StatusForbidden, api.CodeForbidden, code, body)
	require.Contains(t, decodeAs[api.ErrorResponse](t, body).Error, "--reapers is empty")
	p.acquire(t, "admin", api.OperationUpdate, api.ReapLockResource, "")

	// No auth: any node, unless --reapers names some.
	open := startServer(t, t.TempDir())
	resp, err := open.Coordinator.Lock(context.Background(), api.LockRequest{Type: api.OperationUpdate, ResourceID: api.ReapLockResource, NodeID: "node-c"})
	require.NoError(t, err)
	require.True(t, resp.Acquired)
	named := startServer(t, t.TempDir(), func(c *Config) { c.Reapers = []string{"node-a"} })
	status, body := post(t, named.url, "/lock", api.LockRequest{Type: api.OperationUpdate, ResourceID: api.ReapLockResource, NodeID: "node-c"})
	requireCode(t, http.StatusForbidden, api.CodeForbidden, status, body)
}

// TestDanglingReapDropsOnlyOwnRef: node-b's reaper, holding the reap
// lock, sent a dangling delete over node-a's reference to a blob that
// exists: granted, and node-a's reference was gone. Now another node's
// reference refuses it (409 in_use, naming the rule), whatever the
// reaper saw; its own goes, alone.
func TestDanglingReapDropsOnlyOwnRef(t *testing.T) {
	p := startPeers(t, func(c *Config) { c.ReapGrace, c.Reapers = 0, []string{"node-c"} })
	const others, shared, own = "sha256:others", "sha256:shared", "sha256:own"
	p.addRef(t, "node-a", others)
	p.addRef(t, "node-a", shared)
	p.addRef(t, "node-c", shared)
	p.addRef(t, "node-c", own)
	reaper := p.acquire(t, "node-c", api.OperationUpdate, api.ReapLockResource, "")

	for _, id := range []string{others, shared} {
		code, body := p.lockAs(t, "node-c", api.OperationDelete, id, api.ReapDangling)
		requireCode(t, http.StatusConflict, api.CodeInUse, code, body)
		e := decodeAs[api.ErrorResponse](t, body)
		require.Contains(t, e.Error, "drops only the reaper's own reference")
		require.NotNil(t, e.Refs)
		require.Equal(t, []string{"node-a"}, e.Refs.Nodes, "the refusal names whose reference stays")
		p.requireNoDelete(t, id)
	}
	p.requireRefs(t, others, []string{"node-a"}, "node-a's reference stays")
	p.requireRefs(t, shared, []string{"node-a", "node-c"}, "both references stay")

	lease := p.acquire(t, "node-c", api.OperationDelete, own, api.ReapDangling)
	p.unlock(t, "node-c", api.OperationDelete, own, lease, true)
	p.requireRefs(t, own, nil, "the reaper's own reference went")
	p.unlock(t, "node-c", api.OperationUpdate, api.ReapLockResource, reaper, true)
}

// TestReapHoldBounded: a node that kept the reap lock alive held it for
// ever, and no reaper ran. Now one hold lasts --reap-max-hold: its lease
// ends there, a keepalive past it is refused, its reap deletes are
// forbidden, another reaper takes the lock, and the cut node may not take
// it again for as long.
func TestReapHoldBounded(t *testing.T) {
	p, clock, _ := startClockedPeers(t, 0)
	hold := 48 * time.Hour // startClockedPeers' --reap-max-hold
	const id = "sha256:orphan"
	keepalive := func(lease api.LockResponse) (int, []byte) {
		return p.call(t, "node-a", http.MethodPost, "/lock/keepalive", nil,
			api.KeepaliveRequest{Type: api.OperationUpdate, ResourceID: api.ReapLockResource, LeaseID: lease.LeaseID})
	}
	acquired := clock.now()
	lease := p.acquire(t, "node-a", api.OperationUpdate, api.ReapLockResource, "")
	// Kept alive within the bound: still held.
	for range 3 {
		clock.advance(hold / 4)
		code, body := keepalive(lease)
		require.Equal(t, http.StatusOK, code, string(body))
	}
	l := p.acquire(t, "node-a", api.OperationDelete, id, api.ReapOrphan)
	p.unlock(t, "node-a", api.OperationDelete, id, l, false)

	clock.advance(hold / 4)
	require.GreaterOrEqual(t, clock.now().Sub(acquired), hold)
	code, body := p.lockAs(t, "node-a", api.OperationDelete, id, api.ReapOrphan)
	requireCode(t, http.StatusForbidden, api.CodeForbidden, code, body)
	code, body = keepalive(lease)
	requireCode(t, http.StatusForbidden, api.CodeNotHolder, code, body)
	require.Contains(t, decodeAs[api.ErrorResponse](t, body).Error, "--reap-max-hold")

	// Taken away: another reaper takes it; the cut node may not yet.
	other := p.acquire(t, "node-c", api.OperationUpdate, api.ReapLockResource, "")
	p.unlock(t, "node-c", api.OperationUpdate, api.ReapLockResource, other, true)
	code, body = p.lockAs(t, "node-a", api.OperationUpdate, api.ReapLockResource, "")
	requireCode(t, http.StatusForbidden, api.CodeForbidden, code, body)
	require.Contains(t, decodeAs[api.ErrorResponse](t, body).Error, "bound of one hold")
	clock.advance(hold)
	p.acquire(t, "node-a", api.OperationUpdate, api.ReapLockResource, "")
}

// TestExpireIgnoresCallersFigure: the coordinator took the reaper's
// marker_unchanged_ms on trust, so a reaper claiming 1000 h expired a
// member whose marker it had never looked at. Now only the coordinator's
// own measure counts: the same reaper reporting the same marker state at
// two calls node_expiry apart, in the coordinator's uptime.
func TestExpireIgnoresCallersFigure(t *testing.T) {
	p, clock, _ := startClockedPeers(t, 0)
	ctx := context.Background()
	const expiry = 48 * time.Hour // startClockedPeers' --node-expiry
	session(t, p.Coordinator, "mallory")
	p.addRef(t, "mallory", blob)
	clock.advance(25 * time.Hour) // the session lapsed
	clock.advance(expiry)         // and it has been absent that long
	require.GreaterOrEqual(t, absentMs(t, p.Coordinator, "mallory"), expiry.Milliseconds())

	expire := func(reaper, marker string) (int, []byte) {
		t.Helper()
		lease := p.acquire(t, reaper, api.OperationUpdate, api.ReapLockResource, "")
		defer p.unlock(t, reaper, api.OperationUpdate, api.ReapLockResource, lease, true)
		return p.call(t, reaper, http.MethodPost, "/nodes/mallory/expire", nil, api.ExpireRequest{
			NodeID: reaper, LeaseID: lease.LeaseID, Marker: marker, MarkerUnchangedMs: (1000 * time.Hour).Milliseconds()})
	}
	refused := func(code int, body []byte, why string) {
		t.Helper()
		requireCode(t, http.StatusConflict, api.CodeNotExpired, code, body)
		require.Contains(t, decodeAs[api.ErrorResponse](t, body).Error, "marker", why)
		p.requireRefs(t, blob, []string{"mallory"}, why)
	}
	code, body := expire("node-a", "")
	refused(code, body, "no marker state: no evidence")
	require.Contains(t, string(body), "node forget")
	code, body = expire("node-a", "state-1")
	refused(code, body, "the first report of a state")
	clock.advance(expiry - time.Minute)
	code, body = expire("node-a", "state-1")
	refused(code, body, "a minute short of the expiry since the first report")
	code, body = expire("node-c", "state-1")
	refused(code, body, "another reaper's report starts its own measure")
	clock.advance(expiry)
	code, body = expire("node-a", "state-2")
	refused(code, body, "the state changed")
	clock.advance(expiry)
	code, body = expire("node-a", "state-2")
	require.Equal(t, http.StatusOK, code, string(body))
	resp := decodeAs[api.ExpireResponse](t, body)
	require.GreaterOrEqual(t, resp.MarkerUnchangedMs, expiry.Milliseconds())
	require.Less(t, resp.MarkerUnchangedMs, (expiry + time.Minute).Milliseconds(), "the coordinator's measure, not the caller's 1000 h")
	refs, err := p.Coordinator.Refs(ctx, blob)
	require.NoError(t, err)
	require.Empty(t, refs.Nodes)
}
