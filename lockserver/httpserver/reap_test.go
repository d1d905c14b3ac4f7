package httpserver

import (
	"context"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sharedcontent/sharedcontent/internal/testutil/members"
	"github.com/sharedcontent/sharedcontent/lockserver"
	"github.com/sharedcontent/sharedcontent/lockserver/api"
)

// The reaper's deletes under abuse (docs/design.md §9, §8.12), played by
// peers with node tokens against node-a's references, over HTTP.

// testClock is a Coordinator's clock that a test moves forward: the real
// (monotonic) clock plus a skew.
type testClock struct{ skew atomic.Int64 }

func (c *testClock) now() time.Time { return time.Now().Add(time.Duration(c.skew.Load())) }

func (c *testClock) advance(d time.Duration) { c.skew.Add(int64(d)) }

// startClockedPeers is startPeers' cast (node tokens, an admin token) on
// a Coordinator whose clock the test moves, and the clock's time just before
// the Coordinator started. Nothing expires on its own while the clock moves by
// hours: leases, claims and sessions last a day.
func startClockedPeers(t *testing.T, grace time.Duration) (*peers, *testClock, time.Time) {
	t.Helper()
	cfg := lockserver.DefaultConfig()
	cfg.LeaseTTL, cfg.ClaimTimeout, cfg.SessionTTL, cfg.NodeExpiry = 24*time.Hour, 24*time.Hour, 24*time.Hour, 48*time.Hour
	cfg.ReapGrace = grace
	cfg.Reapers, cfg.ReapersRequired, cfg.MaxReapHold = []string{"node-a", "node-c"}, true, 48*time.Hour
	clock := &testClock{}
	started := clock.now()
	l, err := lockserver.NewCoordinator(cfg, lockserver.Options{Refs: newTestRefs(), Now: clock.now})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, l.Close()) })
	tokens := map[string]string{"node-a": "tok-a", "node-c": "tok-c", "mallory": "tok-m"}
	byToken := map[string]string{}
	for node, tok := range tokens {
		byToken[tok] = node
	}
	h := NewHandler(l, WithNodeTokens(byToken), WithAdminToken("tok-admin"))
	tokens["admin"] = "tok-admin"
	return &peers{testServer: &testServer{Server: &Server{Coordinator: l}, url: serveHandler(t, h)}, tokens: tokens}, clock, started
}

// lockAs sends a lock request as who, for its own node.
func (p *peers) lockAs(t *testing.T, who string, typ api.OperationType, id string, reap api.ReapMode) (int, []byte) {
	t.Helper()
	return p.call(t, who, http.MethodPost, "/lock", nil, api.LockRequest{Type: typ, ResourceID: id, NodeID: who, Reap: reap})
}

// acquire takes a lock as who and returns its lease.
func (p *peers) acquire(t *testing.T, who string, typ api.OperationType, id string, reap api.ReapMode) api.LockResponse {
	t.Helper()
	code, body := p.lockAs(t, who, typ, id, reap)
	require.Equal(t, http.StatusOK, code, string(body))
	resp := decodeAs[api.LockResponse](t, body)
	require.True(t, resp.Acquired, string(body))
	return resp
}

func (p *peers) unlock(t *testing.T, who string, typ api.OperationType, id string, lease api.LockResponse, success bool) {
	t.Helper()
	code, body := p.call(t, who, http.MethodPost, "/unlock", nil,
		api.UnlockRequest{Type: typ, ResourceID: id, LeaseID: lease.LeaseID, Success: success})
	require.Equal(t, http.StatusOK, code, string(body))
}

// addRef adds who's reference to id, who holding a live session and
// synced, as its daemon does.
func (p *peers) addRef(t *testing.T, who, id string) {
	t.Helper()
	members.Open(t, p.Coordinator, who)
	code, body := p.call(t, who, http.MethodPost, "/refs/add", nil, api.RefsAddRequest{ResourceID: id, NodeID: who})
	require.Equal(t, http.StatusOK, code, string(body))
}

// requireRefs checks id's reference set.
func (p *peers) requireRefs(t *testing.T, id string, want []string, why string) {
	t.Helper()
	refs, err := p.Coordinator.Refs(context.Background(), id)
	require.NoError(t, err)
	if len(want) == 0 {
		require.Empty(t, refs.Nodes, why)
		return
	}
	require.Equal(t, want, refs.Nodes, why)
}

// requireNoDelete checks that no delete of id is held or queued.
func (p *peers) requireNoDelete(t *testing.T, id string) {
	t.Helper()
	st, err := p.Coordinator.Status(context.Background(), api.OperationDelete, id, "", "")
	require.NoError(t, err)
	require.Nil(t, st.Holder, "a delete of %s is held", id)
	require.Zero(t, st.QueueLength, "a delete of %s is queued", id)
}

// TestReapUnknownModeRefused (item 10): a delete with "reap":"bogus"
// from node-c was granted although node-a references the blob, and its
// unlock dropped node-a's reference. Now it is 400 and changes nothing;
// so is a reap mode on a pull.
func TestReapUnknownModeRefused(t *testing.T) {
	p := startPeers(t)
	p.addRef(t, "node-a", blob)

	code, body := p.lockAs(t, "node-c", api.OperationDelete, blob, "bogus")
	requireCode(t, http.StatusBadRequest, api.CodeInvalidArgument, code, body)
	msg := decodeAs[api.ErrorResponse](t, body).Error
	require.Contains(t, msg, `"bogus"`)
	require.Contains(t, msg, `"orphan"`, "the error names the allowed values")
	require.Contains(t, msg, `"dangling"`, "the error names the allowed values")
	p.requireNoDelete(t, blob)
	p.requireRefs(t, blob, []string{"node-a"}, "node-a's reference is intact")

	code, body = p.lockAs(t, "node-c", api.OperationPull, blob, api.ReapOrphan)
	requireCode(t, http.StatusBadRequest, api.CodeInvalidArgument, code, body)
	st, err := p.Coordinator.Status(context.Background(), api.OperationPull, blob, "", "")
	require.NoError(t, err)
	require.Nil(t, st.Holder, "the refused pull holds nothing")
	p.requireRefs(t, blob, []string{"node-a"}, "node-a's reference is intact")
}

// TestReapModeByLockType (item 10): every reap value on every lock type.
// Only no mode, or a known mode on a delete, is accepted; the rest are
// 400 and hold nothing. The requester holds the reap lock and the grace
// is 0, so an accepted request is granted.
func TestReapModeByLockType(t *testing.T) {
	p := startPeers(t, func(c *Config) { c.ReapGrace, c.Reapers = 0, []string{"node-a"} })
	p.acquire(t, "node-a", api.OperationUpdate, api.ReapLockResource, "")
	types := []api.OperationType{api.OperationPull, api.OperationUpdate, api.OperationDelete}
	modes := []api.ReapMode{"", api.ReapOrphan, api.ReapDangling, "bogus", "Orphan", " dangling", "orphan,dangling"}
	for _, typ := range types {
		for _, mode := range modes {
			t.Run(fmt.Sprintf("%s/%q", typ, mode), func(t *testing.T) {
				id := fmt.Sprintf("sha256:%s-%x", typ, mode)
				valid := mode == "" || (typ == api.OperationDelete && (mode == api.ReapOrphan || mode == api.ReapDangling))
				code, body := p.lockAs(t, "node-a", typ, id, mode)
				if !valid {
					requireCode(t, http.StatusBadRequest, api.CodeInvalidArgument, code, body)
					st, err := p.Coordinator.Status(context.Background(), typ, id, "", "")
					require.NoError(t, err)
					require.Nil(t, st.Holder)
					return
				}
				require.Equal(t, http.StatusOK, code, string(body))
				lease := decodeAs[api.LockResponse](t, body)
				require.True(t, lease.Acquired, string(body))
				p.unlock(t, "node-a", typ, id, lease, false)
			})
		}
	}
}

// TestReapNeedsTheReapLock (item 11): node-c sent reap=dangling for a
// blob node-a references, without the reaper's lock, and its unlock
// dropped node-a's reference. Only the reap lock's holder may send it.
func TestReapNeedsTheReapLock(t *testing.T) {
	p := startPeers(t, func(c *Config) { c.ReapGrace, c.Reapers = 0, []string{"mallory"} })
	p.addRef(t, "node-a", blob)
	for _, mode := range []api.ReapMode{api.ReapDangling, api.ReapOrphan} {
		code, body := p.lockAs(t, "node-c", api.OperationDelete, blob, mode)
		requireCode(t, http.StatusForbidden, api.CodeForbidden, code, body)
		require.Contains(t, decodeAs[api.ErrorResponse](t, body).Error, "nobody holds it")
	}
	reaper := p.acquire(t, "mallory", api.OperationUpdate, api.ReapLockResource, "")
	code, body := p.lockAs(t, "node-c", api.OperationDelete, blob, api.ReapDangling)
	requireCode(t, http.StatusForbidden, api.CodeForbidden, code, body)
	require.Contains(t, decodeAs[api.ErrorResponse](t, body).Error, "held by node mallory")
	p.requireNoDelete(t, blob)
	p.requireRefs(t, blob, []string{"node-a"}, "node-a's reference is intact")

	// Once the reaper lets go, not even it may.
	p.unlock(t, "mallory", api.OperationUpdate, api.ReapLockResource, reaper, true)
	code, body = p.lockAs(t, "mallory", api.OperationDelete, blob, api.ReapDangling)
	requireCode(t, http.StatusForbidden, api.CodeForbidden, code, body)
	p.requireRefs(t, blob, []string{"node-a"}, "node-a's reference is intact")
}

// TestReapGrace (item 11): the coordinator applies the reaper's grace
// itself. It refuses a reap delete while it has been up less than the
// grace, and within the grace of the resource's last reference change or
// pull (also for a reap delete that queued before the pull completed);
// after the grace the holder of the reap lock is granted. Its clock is
// moved: the inequalities are asserted on the times recorded around each
// call.
func TestReapGrace(t *testing.T) {
	const grace = time.Hour
	p, clock, started := startClockedPeers(t, grace)
	p.acquire(t, "node-a", api.OperationUpdate, api.ReapLockResource, "")
	const orphan, used, pulled = "sha256:orphan", "sha256:used", "sha256:pulled"

	// Just started: it cannot know what happened before.
	code, body := p.lockAs(t, "node-a", api.OperationDelete, orphan, api.ReapOrphan)
	requireCode(t, http.StatusConflict, api.CodeInUse, code, body)
	require.Contains(t, decodeAs[api.ErrorResponse](t, body).Error, "has been up")
	require.Less(t, clock.now().Sub(started), grace, "asked within the grace of the start")

	clock.advance(grace)
	lease := p.acquire(t, "node-a", api.OperationDelete, orphan, api.ReapOrphan)
	p.unlock(t, "node-a", api.OperationDelete, orphan, lease, false)

	// The reaper's own reference added: refused within the grace of it.
	beforeRef := clock.now()
	p.addRef(t, "node-a", used)
	afterRef := clock.now()
	refusedWithin := func(why string) {
		t.Helper()
		code, body := p.lockAs(t, "node-a", api.OperationDelete, used, api.ReapDangling)
		require.Less(t, clock.now().Sub(beforeRef), grace, "%s: asked within the grace", why)
		requireCode(t, http.StatusConflict, api.CodeInUse, code, body)
		require.Contains(t, decodeAs[api.ErrorResponse](t, body).Error, "within the coordinator's reap grace")
		p.requireNoDelete(t, used)
		p.requireRefs(t, used, []string{"node-a"}, why)
	}
	refusedWithin("right after the reference")
	clock.advance(grace - time.Minute)
	refusedWithin("a minute before the grace ends")
	clock.advance(time.Minute)
	beforeGrant := clock.now()
	lease = p.acquire(t, "node-a", api.OperationDelete, used, api.ReapDangling)
	require.GreaterOrEqual(t, beforeGrant.Sub(afterRef), grace, "granted after the grace")
	p.unlock(t, "node-a", api.OperationDelete, used, lease, true)
	p.requireRefs(t, used, nil, "a dangling reap drops the reaper's own reference")

	// A pull completed while the reap delete queued behind it: refused
	// when its turn comes.
	pull := p.acquire(t, "node-c", api.OperationPull, pulled, "")
	wait := true
	code, body = p.call(t, "node-a", http.MethodPost, "/lock", nil,
		api.LockRequest{Type: api.OperationDelete, ResourceID: pulled, NodeID: "node-a", RequestID: "reap-1", Reap: api.ReapDangling, Wait: &wait})
	require.Equal(t, http.StatusOK, code, string(body))
	require.True(t, decodeAs[api.LockResponse](t, body).Queued, string(body))
	members.Open(t, p.Coordinator, "node-c") // its session, as its daemon holds it
	p.unlock(t, "node-c", api.OperationPull, pulled, pull, true)
	p.requireNoDelete(t, pulled)
	p.requireRefs(t, pulled, []string{"node-c"}, "the pull's reference is intact")
	code, body = p.lockAs(t, "node-a", api.OperationDelete, pulled, api.ReapDangling)
	requireCode(t, http.StatusConflict, api.CodeInUse, code, body)

	// The reap lock's lease expired (whether or not a sweep has released
	// it yet): forbidden.
	clock.advance(25 * time.Hour)
	code, body = p.lockAs(t, "node-a", api.OperationDelete, pulled, api.ReapDangling)
	requireCode(t, http.StatusForbidden, api.CodeForbidden, code, body)
	p.requireRefs(t, pulled, []string{"node-c"}, "the pull's reference is intact")
}
