package lockserver

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/containerd/errdefs"
	"github.com/stretchr/testify/require"

	"github.com/sharedcontent/sharedcontent/lockserver/api"
	"github.com/sharedcontent/sharedcontent/refcount"
)

// answers holds the last session answer each test node received, by
// Coordinator and node ID: session and syncRefs echo it, as a node does.
var answers sync.Map // nodeKey → answer

type nodeKey struct {
	c    *Coordinator
	node string
}

type answer struct {
	resp     api.SessionResponse
	received time.Time
}

// echoOf returns the echo of node's last answer, sent now: nil (open a
// session) when there is none or it is more than 2·TTL/3 old, as a node
// does.
func echoOf(c *Coordinator, node string) *api.Echo {
	v, ok := answers.Load(nodeKey{c, node})
	if !ok {
		return nil
	}
	a := v.(answer)
	elapsed := time.Since(a.received)
	if elapsed > 2*c.cfg.SessionTTL/3 {
		return nil
	}
	return &api.Echo{Epoch: a.resp.Epoch, StampMs: a.resp.StampMs, ElapsedMs: elapsed.Milliseconds()}
}

// session renews node's session (opens it the first time), as a node
// does.
func session(t *testing.T, c *Coordinator, node string) api.SessionResponse {
	t.Helper()
	resp, err := renew(c, node)
	require.NoError(t, err)
	return resp
}

func renew(c *Coordinator, node string) (api.SessionResponse, error) {
	resp, err := c.Session(context.Background(), api.SessionRequest{NodeID: node, Echo: echoOf(c, node)})
	if err == nil {
		answers.Store(nodeKey{c, node}, answer{resp, time.Now()})
	}
	return resp, err
}

func syncRefs(t *testing.T, c *Coordinator, node, syncID string, done bool, ids ...string) {
	t.Helper()
	req := api.SyncRequest{SyncID: syncID, ResourceIDs: ids, Done: done}
	if done {
		req.Echo = echoOf(c, node)
	}
	_, err := c.SyncRefs(context.Background(), node, req)
	require.NoError(t, err)
}

func refsOf(t *testing.T, c *Coordinator, id string) []string {
	t.Helper()
	rc, err := c.Refs(context.Background(), id)
	require.NoError(t, err)
	return rc.Nodes
}

// TestDeleteWaitsForUnsyncedMembers: the delete rule (docs/design.md §8.7). A member that
// has not sent its journal blocks every delete (409 unsynced, naming it),
// and the deleter's own reference goes anyway; once it syncs, the delete
// is granted.
func TestDeleteWaitsForUnsyncedMembers(t *testing.T) {
	c := newTestCoordinator(t)
	ctx := context.Background()
	require.False(t, session(t, c, "n1").Synced)
	syncRefs(t, c, "n1", "s1", true, blob)
	require.True(t, session(t, c, "n1").Synced)
	session(t, c, "n2") // a member, not synced

	_, err := c.Lock(ctx, lockReq(api.OperationDelete, "n1"))
	require.ErrorIs(t, err, api.ErrUnsynced)
	var ue *api.UnsyncedError
	require.ErrorAs(t, err, &ue)
	require.Equal(t, []string{"n2"}, ue.Nodes)
	require.Empty(t, refsOf(t, c, blob), "the deleter's reference is gone all the same")

	syncRefs(t, c, "n2", "s2", true)
	resp := mustLock(t, c, api.OperationDelete, "n1")
	require.True(t, resp.Acquired)
}

// TestSyncKeepsChangesMadeDuringIt: a reference the node adds after the
// sync started survives the replacement even if the snapshot lacks it, and
// one it drops is not brought back by an older snapshot.
func TestSyncKeepsChangesMadeDuringIt(t *testing.T) {
	c := newTestCoordinator(t)
	ctx := context.Background()
	session(t, c, "n1")
	_, err := c.AddRef(ctx, "sha256:dropped", "n1")
	require.NoError(t, err)
	_, err = c.AddRef(ctx, "sha256:stale", "n1") // not in the snapshot: goes
	require.NoError(t, err)

	syncRefs(t, c, "n1", "s1", false) // announced before the snapshot
	_, err = c.AddRef(ctx, "sha256:added", "n1")
	require.NoError(t, err)
	_, err = c.Lock(ctx, api.LockRequest{Type: api.OperationDelete, ResourceID: "sha256:dropped", NodeID: "n1"})
	require.ErrorIs(t, err, api.ErrUnsynced, "n1 itself is not synced yet")
	syncRefs(t, c, "n1", "s1", true, "sha256:dropped", "sha256:kept")

	require.Equal(t, []string{"n1"}, refsOf(t, c, "sha256:added"))
	require.Equal(t, []string{"n1"}, refsOf(t, c, "sha256:kept"))
	require.Empty(t, refsOf(t, c, "sha256:dropped"))
	require.Empty(t, refsOf(t, c, "sha256:stale"))
	require.True(t, session(t, c, "n1").Synced)
}

// TestLapsedSessionIsUnsynced: a member whose session lapsed must sync
// again, and a delete lease's keepalive is refused (and the lease
// released) while it is away: a deleter checks right before it removes.
// The coordinator's clock is moved by hand, so that the rule's own times
// (TTL after the last renewal) are what decides, not the machine's load.
func TestLapsedSessionIsUnsynced(t *testing.T) {
	const ttl = 3 * time.Second
	coord := newTestCoordinator(t, func(c *Config) { c.SessionTTL = ttl })
	clock := useFakeClock(coord)
	ctx := context.Background()
	a1 := syncedNode(t, coord, "n1")
	syncedNode(t, coord, "n2")
	g := mustLock(t, coord, api.OperationDelete, "n1")
	require.True(t, g.Acquired)
	keepalive := func() error {
		_, err := coord.Keepalive(ctx, api.KeepaliveRequest{Type: api.OperationDelete, ResourceID: blob, LeaseID: g.LeaseID})
		return err
	}

	// n1 renews TTL/2 after its open (its echo says it held the answer that
	// long, and the renewal arrives at once); n2 does not.
	clock.at(ttl / 2)
	_, err := coord.Session(ctx, sessionReq("n1", echo(a1, ttl/2)))
	require.NoError(t, err)
	require.NoError(t, keepalive(), "both sessions live: the delete goes on")

	// Just past n2's TTL: n2 has lapsed, n1 (renewed at TTL/2) has not.
	clock.at(ttl + time.Millisecond)
	require.True(t, live(t, coord, "n1"), "n1 renewed")
	require.False(t, live(t, coord, "n2"), "n2's session lapses TTL after its last renewal")
	require.Error(t, keepalive(), "n2's lapse revokes the delete")
	require.ErrorIs(t, keepalive(), api.ErrNotHolder, "the revoked lease is released")
	a2, err := coord.Session(ctx, sessionReq("n2", nil))
	require.NoError(t, err)
	require.False(t, a2.Synced, "a lapsed session starts unsynced")
}

// TestRestartLosesNoMember: members persist; after a restart none is
// synced, the epoch is higher and the cluster ID the same.
func TestRestartLosesNoMember(t *testing.T) {
	dir := t.TempDir()
	ts := startStored(t, dir)
	before := ts.Coordinator.Cluster()
	session(t, ts.Coordinator, "n1")
	syncRefs(t, ts.Coordinator, "n1", "s", true, blob)
	ts.Stop()

	ts = startStored(t, dir)
	after := ts.Coordinator.Cluster()
	require.Equal(t, before.ClusterID, after.ClusterID)
	require.Greater(t, after.Epoch, before.Epoch)
	nodes, err := ts.Coordinator.Nodes(context.Background())
	require.NoError(t, err)
	require.Len(t, nodes.Nodes, 1)
	require.False(t, nodes.Nodes[0].Synced)
	_, err = ts.Coordinator.Lock(context.Background(), api.LockRequest{Type: api.OperationDelete, ResourceID: "sha256:unused", NodeID: "n2"})
	require.ErrorIs(t, err, api.ErrUnsynced, "n1 has not synced since the restart")
	require.Equal(t, []string{"n1"}, refsOf(t, ts.Coordinator, blob))
}

// everyCommit counts every Commit its storage is given, empty or not.
type everyCommit struct {
	refcount.Storage
	commits atomic.Int64
}

func (s *everyCommit) Commit(ctx context.Context, b *refcount.Batch) error {
	s.commits.Add(1)
	return s.Storage.Commit(ctx, b)
}

// TestForgetNonMemberWritesNothing: forgetting a node that is no member
// (never joined, or forgotten already) and holds no reference is
// api.ErrNotFound (errdefs NotFound, 404 not_found) naming the node, and
// the storage is given no write; a non-member the store still holds
// references of (a store older than the reference rule) has them dropped.
//
// Before: such a forget answered OK and committed a batch that changed
// nothing (a replace of no references, a delete of no member).
func TestForgetNonMemberWritesNothing(t *testing.T) {
	ctx := context.Background()
	mem := refcount.NewMemoryStorage()
	stray := "sha256:" + strings.Repeat("5", 64)
	require.NoError(t, mem.Commit(ctx, new(refcount.Batch).AddRef(stray, "ghost")))
	storage := &everyCommit{Storage: mem}
	c, err := NewCoordinator(DefaultConfig(), Options{Refs: refcount.NewManager(storage)})
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	for _, n := range []string{"n1", "n2"} {
		_, err := c.Session(ctx, api.SessionRequest{NodeID: n, InstanceID: "i-" + n})
		require.NoError(t, err)
		_, err = c.AddRef(ctx, blob, n)
		require.NoError(t, err)
	}
	end, err := c.EndSession(ctx, api.EndSessionRequest{NodeID: "n1", InstanceID: "i-n1"})
	require.NoError(t, err)
	require.True(t, end.Ended)

	before := storage.commits.Load()
	require.NoError(t, c.Forget(ctx, "n1"))
	require.Greater(t, storage.commits.Load(), before, "a member's forget writes")
	require.Equal(t, []string{"n2"}, refsOf(t, c, blob))

	for _, node := range []string{"n1", "never-joined"} {
		before := storage.commits.Load()
		err := c.Forget(ctx, node)
		require.ErrorIs(t, err, api.ErrNotFound, node)
		require.True(t, errdefs.IsNotFound(err), "%v", err)
		require.ErrorContains(t, err, "forget node "+node+": no such member")
		require.ErrorContains(t, err, "nothing changed")
		status, code := api.HTTPStatus(err)
		require.Equal(t, 404, status)
		require.Equal(t, api.CodeNotFound, code)
		require.Equal(t, before, storage.commits.Load(), "forget of %s gave the storage a write", node)
	}
	require.Equal(t, []string{"n2"}, memberIDs(t, c))
	require.Equal(t, []string{"n2"}, refsOf(t, c, blob))

	require.Equal(t, []string{"ghost"}, refsOf(t, c, stray))
	require.NoError(t, c.Forget(ctx, "ghost"), "a non-member's stray references")
	require.Empty(t, refsOf(t, c, stray))
	require.ErrorIs(t, c.Forget(ctx, "ghost"), api.ErrNotFound, "and then it is not found")
}
