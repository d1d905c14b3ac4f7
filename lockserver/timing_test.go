package lockserver

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sharedcontent/sharedcontent/lockserver/api"
)

// fakeClock drives a Coordinator's clock by hand, from its start.
type fakeClock struct {
	coord  *Coordinator
	offset atomic.Int64
}

func useFakeClock(coord *Coordinator) *fakeClock {
	c := &fakeClock{coord: coord}
	start := coord.started
	coord.now = func() time.Time { return start.Add(time.Duration(c.offset.Load())) }
	return c
}

// at sets the clock to d after the Coordinator's start.
func (c *fakeClock) at(d time.Duration) { c.offset.Store(int64(d)) }

// echo is the echo of answer a, sent elapsed after it was received.
func echo(a api.SessionResponse, elapsed time.Duration) *api.Echo {
	return &api.Echo{Epoch: a.Epoch, StampMs: a.StampMs, ElapsedMs: elapsed.Milliseconds()}
}

func sessionReq(node string, e *api.Echo) api.SessionRequest {
	return api.SessionRequest{NodeID: node, Echo: e}
}

// syncIDs numbers the syncs of syncedNode: each is a new sync.
var syncIDs atomic.Int64

// syncedNode opens n1's session at the clock's time (or renews it, in
// the older shape: olderrenewal.go) and syncs it (with ids), returning the
// session's answer.
func syncedNode(t *testing.T, c *Coordinator, node string, ids ...string) api.SessionResponse {
	t.Helper()
	ctx := context.Background()
	a, err := c.Session(ctx, sessionReq(node, nil))
	require.NoError(t, err)
	_, err = c.SyncRefs(ctx, node, api.SyncRequest{SyncID: fmt.Sprintf("s-%s-%d", node, syncIDs.Add(1)), ResourceIDs: ids, Done: true, Echo: echo(a, 0)})
	require.NoError(t, err)
	return a
}

// members makes each node a synced member with a live session
// (syncedNode, no references): the coordinator records references only
// for such a node (the reference rule, refrule.go), as it is for a node's
// daemon once started.
func members(t *testing.T, c *Coordinator, nodes ...string) {
	t.Helper()
	for _, n := range nodes {
		syncedNode(t, c, n)
	}
}

func synced(t *testing.T, c *Coordinator, node string) bool {
	t.Helper()
	nodes, err := c.Nodes(context.Background())
	require.NoError(t, err)
	for _, n := range nodes.Nodes {
		if n.NodeID == node {
			return n.Synced
		}
	}
	return false
}

// TestLateRenewalExtendsNothing (docs/design.md §8.3): a renewal that
// arrives more than TTL/3 after it was sent (by the echoed stamp plus the
// node's elapsed time), or that echoes an answer more than 2·TTL/3 old,
// is 409 late and extends nothing: the session ends TTL after the last
// renewal that counted, and deletes wait for the node from then on.
func TestLateRenewalExtendsNothing(t *testing.T) {
	coord := newTestCoordinator(t, func(c *Config) { c.SessionTTL = 3 * time.Second })
	clock := useFakeClock(coord)
	ctx := context.Background()
	clock.at(time.Second)
	a := syncedNode(t, coord, "n1")
	syncedNode(t, coord, "n2")

	clock.at(2 * time.Second) // sent 0.9 s after the answer, 0.1 s on the way
	a2, err := coord.Session(ctx, sessionReq("n1", echo(a, 900*time.Millisecond)))
	require.NoError(t, err)
	require.True(t, a2.Synced, "a renewal on time keeps the node synced")
	require.Equal(t, int64(2000), a2.StampMs, "the answer is stamped with the coordinator's uptime")

	// Sent 0.1 s after a2 was received, delivered 1.1 s later.
	clock.at(3200 * time.Millisecond)
	_, err = coord.Session(ctx, sessionReq("n1", echo(a2, 100*time.Millisecond)))
	require.ErrorIs(t, err, api.ErrLate)
	require.Equal(t, api.CodeLate, api.Code(err))
	// Sent 2.1 s after a2 (more than 2·TTL/3), on time.
	clock.at(4150 * time.Millisecond)
	_, err = coord.Session(ctx, sessionReq("n1", echo(a2, 2100*time.Millisecond)))
	require.ErrorIs(t, err, api.ErrLate)

	clock.at(5*time.Second - time.Millisecond)
	require.True(t, synced(t, coord, "n1"), "the session the on-time renewal granted")
	_, err = coord.Session(ctx, sessionReq("n2", nil)) // n2 stays live (unsynced; resync below)
	require.NoError(t, err)
	clock.at(5 * time.Second)
	require.False(t, synced(t, coord, "n1"), "the late renewals did not extend the session past arrival + TTL")
	_, err = coord.Lock(ctx, lockReq(api.OperationDelete, "n2"))
	var ue *api.UnsyncedError
	require.ErrorAs(t, err, &ue)
	require.Contains(t, ue.Nodes, "n1")
}

// TestOpenIsNeverSynced: a session request of a current node (one that
// sends its instance ID) without a valid echo (none, or one of another
// epoch) opens a session that is not synced, even while the node's
// session is live and synced: a delayed session-open can never keep a
// node synced. (An older node's, without an instance ID:
// TestOlderRenewalKeepsSynced.)
func TestOpenIsNeverSynced(t *testing.T) {
	coord := newTestCoordinator(t, func(c *Config) { c.SessionTTL = 3 * time.Second })
	clock := useFakeClock(coord)
	ctx := context.Background()
	current := func(e *api.Echo) api.SessionRequest {
		return api.SessionRequest{NodeID: "n1", InstanceID: "i1", Echo: e}
	}
	syncCurrent := func(id string) api.SessionResponse {
		a, err := coord.Session(ctx, current(nil))
		require.NoError(t, err)
		require.False(t, a.Synced)
		_, err = coord.SyncRefs(ctx, "n1", api.SyncRequest{SyncID: id, Done: true, Echo: echo(a, 0)})
		require.NoError(t, err)
		require.True(t, synced(t, coord, "n1"))
		return a
	}
	a := syncCurrent("s1")

	clock.at(500 * time.Millisecond)
	other := echo(a, 100*time.Millisecond)
	other.Epoch++
	resp, err := coord.Session(ctx, current(other))
	require.NoError(t, err)
	require.False(t, resp.Synced, "an echo of another epoch opens a session")
	syncCurrent("s2")
	resp, err = coord.Session(ctx, current(nil))
	require.NoError(t, err)
	require.False(t, resp.Synced, "a request without an echo opens a session")
	require.False(t, synced(t, coord, "n1"))
}

// TestSyncDoneLate: the last chunk of a sync obeys the renewal rule: one
// that arrives more than TTL/3 after it was sent is 409 late and does not
// make the node synced. Without an echo (an older node) it must arrive
// within TTL/3 of the last session answer.
func TestSyncDoneLate(t *testing.T) {
	coord := newTestCoordinator(t, func(c *Config) { c.SessionTTL = 3 * time.Second })
	clock := useFakeClock(coord)
	ctx := context.Background()
	a, err := coord.Session(ctx, sessionReq("n1", nil))
	require.NoError(t, err)
	clock.at(1500 * time.Millisecond) // sent 0.2 s after the answer
	_, err = coord.SyncRefs(ctx, "n1", api.SyncRequest{SyncID: "s", ResourceIDs: []string{blob}, Done: true, Echo: echo(a, 200*time.Millisecond)})
	require.ErrorIs(t, err, api.ErrLate)
	require.False(t, synced(t, coord, "n1"), "a late sync does not make the node synced")
	require.Empty(t, refsOf(t, coord, blob))

	_, err = coord.SyncRefs(ctx, "n1", api.SyncRequest{SyncID: "s2", Done: true})
	require.ErrorIs(t, err, api.ErrLate, "without an echo: 1.5 s after the last answer")
	a, err = coord.Session(ctx, sessionReq("n1", nil))
	require.NoError(t, err)
	clock.at(2 * time.Second)
	_, err = coord.SyncRefs(ctx, "n1", api.SyncRequest{SyncID: "s3", Done: true})
	require.NoError(t, err, "without an echo, within TTL/3 of the answer (an older node)")
	require.True(t, synced(t, coord, "n1"))

	a, err = coord.Session(ctx, sessionReq("n1", echo(a, 400*time.Millisecond)))
	require.NoError(t, err)
	require.True(t, a.Synced)
	clock.at(2600 * time.Millisecond)
	_, err = coord.SyncRefs(ctx, "n1", api.SyncRequest{SyncID: "s4", ResourceIDs: []string{blob}, Done: true, Echo: echo(a, 300*time.Millisecond)})
	require.NoError(t, err)
	require.Equal(t, []string{"n1"}, refsOf(t, coord, blob))
}

// TestDuplicateNode (docs/design.md §8.5): while one instance's session
// is live, another instance's session under the same node ID is 409
// duplicate_node, naming the node and what to do; once it has lapsed, the
// other instance (a restarted daemon) gets it. An older node (no
// instance ID) is not checked; a node ID that sent one must send one.
func TestDuplicateNode(t *testing.T) {
	coord := newTestCoordinator(t, func(c *Config) { c.SessionTTL = 3 * time.Second })
	clock := useFakeClock(coord)
	ctx := context.Background()
	_, err := coord.Session(ctx, api.SessionRequest{NodeID: "host", InstanceID: "i1"})
	require.NoError(t, err)
	_, err = coord.AddRef(ctx, blob, "host")
	require.NoError(t, err)

	clock.at(2 * time.Second)
	_, err = coord.Session(ctx, api.SessionRequest{NodeID: "host", InstanceID: "i2"})
	require.ErrorIs(t, err, api.ErrDuplicateNode)
	require.ErrorContains(t, err, `"host"`)
	require.ErrorContains(t, err, "--node-id")
	require.Equal(t, api.CodeDuplicateNode, api.Code(err))
	require.Equal(t, []string{"host"}, refsOf(t, coord, blob), "the refused instance changed nothing")
	_, err = coord.Session(ctx, api.SessionRequest{NodeID: "host", InstanceID: "i1"})
	require.NoError(t, err, "the live instance renews")

	clock.at(5 * time.Second)
	_, err = coord.Session(ctx, api.SessionRequest{NodeID: "host", InstanceID: "i2"})
	require.NoError(t, err, "after the first instance's session lapsed")
	_, err = coord.Session(ctx, api.SessionRequest{NodeID: "host"})
	require.ErrorIs(t, err, api.ErrInvalidArgument, "a node ID that sent an instance ID must send one")
	_, err = coord.Session(ctx, api.SessionRequest{NodeID: "old"})
	require.NoError(t, err, "an older node without an instance ID is not checked")
}

// TestSyncTailOfUnknownSync: a sync whose start the coordinator lost (its
// session lapsed and a new one was opened mid-sync) must not be finished
// by its tail alone: on a known generation that would replace the node's
// references with the last chunk. A chunk that declares its offset is
// refused unless it starts the sync; nothing changes.
func TestSyncTailOfUnknownSync(t *testing.T) {
	coord := newTestCoordinator(t, func(c *Config) { c.SessionTTL = 3 * time.Second })
	clock := useFakeClock(coord)
	ctx := context.Background()
	blobs := []string{"sha256:" + strings.Repeat("a", 64), "sha256:" + strings.Repeat("b", 64)}
	a := syncedNode(t, coord, "n1", blobs...)
	clock.at(time.Second)
	off := 1
	_, err := coord.SyncRefs(ctx, "n1", api.SyncRequest{SyncID: "lost", ResourceIDs: blobs[1:], Done: true, Offset: &off, Echo: echo(a, time.Second)})
	require.ErrorIs(t, err, api.ErrNotFound)
	require.Contains(t, err.Error(), "start the sync again")
	for _, b := range blobs {
		rc, err := coord.refs.Refs(ctx, b)
		require.NoError(t, err)
		require.True(t, rc.Has("n1"), "n1's reference to %s survives the refused tail", b)
	}
	// A sync that starts properly goes through.
	zero, one := 0, 1
	_, err = coord.SyncRefs(ctx, "n1", api.SyncRequest{SyncID: "new", ResourceIDs: []string{}, Offset: &zero})
	require.NoError(t, err)
	_, err = coord.SyncRefs(ctx, "n1", api.SyncRequest{SyncID: "new", ResourceIDs: blobs[:1], Offset: &zero})
	require.NoError(t, err)
	_, err = coord.SyncRefs(ctx, "n1", api.SyncRequest{SyncID: "new", ResourceIDs: blobs[1:], Done: true, Offset: &one, Echo: echo(a, time.Second)})
	require.NoError(t, err)
}

// TestDuplicateInstancesPauseDeletes (docs/design.md §8.5): host A's session lapsed (cut off), a clone B with the same node
// ID started and synced, then A comes back and is refused. Until A stops
// knocking, B's GC must not drop the ID's references (they may be A's),
// and nobody's delete is granted (A may have used blobs fail-open that
// only its journal knows). Once A has not knocked for a session TTL,
// deletes go through again.
func TestDuplicateInstancesPauseDeletes(t *testing.T) {
	coord := newTestCoordinator(t, func(c *Config) { c.SessionTTL = 3 * time.Second })
	clock := useFakeClock(coord)
	ctx := context.Background()
	other := "sha256:" + strings.Repeat("c", 64)
	_, err := coord.Session(ctx, api.SessionRequest{NodeID: "host", InstanceID: "A"})
	require.NoError(t, err)
	_, err = coord.AddRef(ctx, blob, "host") // A uses blob
	require.NoError(t, err)

	clock.at(4 * time.Second) // A's session lapsed; B starts and syncs
	b, err := coord.Session(ctx, api.SessionRequest{NodeID: "host", InstanceID: "B"})
	require.NoError(t, err)
	_, err = coord.SyncRefs(ctx, "host", api.SyncRequest{SyncID: "b", Generation: "gb", Done: true, Echo: echo(b, 0)})
	require.NoError(t, err)
	syncedNode(t, coord, "n2")
	_, err = coord.Session(ctx, api.SessionRequest{NodeID: "host", InstanceID: "A"})
	require.ErrorIs(t, err, api.ErrDuplicateNode, "A is back while B holds the session")

	_, err = coord.Lock(ctx, api.LockRequest{Type: api.OperationDelete, ResourceID: blob, NodeID: "host", RequestID: "gc-b"})
	require.ErrorIs(t, err, api.ErrDuplicateNode, "B's GC may not drop the ID's reference: it may be A's")
	require.Equal(t, []string{"host"}, refsOf(t, coord, blob))
	_, err = coord.Lock(ctx, api.LockRequest{Type: api.OperationDelete, ResourceID: other, NodeID: "n2", RequestID: "gc-n2"})
	var unsynced *api.UnsyncedError
	require.ErrorAs(t, err, &unsynced, "nobody deletes while two instances share an ID")
	require.Equal(t, []string{"host"}, unsynced.Nodes)
	require.False(t, synced(t, coord, "host"))

	// A stops knocking; B renews on time. A session TTL later deletes resume.
	clock.at(5 * time.Second)
	b, err = coord.Session(ctx, api.SessionRequest{NodeID: "host", InstanceID: "B", Echo: echo(b, time.Second)})
	require.NoError(t, err)
	clock.at(6 * time.Second)
	_, err = coord.Session(ctx, api.SessionRequest{NodeID: "host", InstanceID: "B", Echo: echo(b, time.Second)})
	require.NoError(t, err)
	_, err = coord.Session(ctx, api.SessionRequest{NodeID: "n2", Echo: nil})
	require.NoError(t, err)
	syncedNode(t, coord, "n2")
	clock.at(7100 * time.Millisecond)
	resp, err := coord.Lock(ctx, api.LockRequest{Type: api.OperationDelete, ResourceID: other, NodeID: "n2", RequestID: "gc-n2-again"})
	require.NoError(t, err)
	require.True(t, resp.Acquired, "deletes resume a session TTL after A's last attempt")
}

// TestSyncFromNewGenerationOnlyAdds (docs/design.md §8.6): a sync from a
// journal generation the coordinator has not had a full sync from (a
// wiped state dir) adds the node's references and drops none; the next
// sync from that generation replaces them. The generation is persisted
// with the member.
func TestSyncFromNewGenerationOnlyAdds(t *testing.T) {
	dir := t.TempDir()
	ts := startStored(t, dir)
	c := ts.Coordinator
	ctx := context.Background()
	sync := func(id, gen string, ids ...string) {
		t.Helper()
		a, err := c.Session(ctx, sessionReq("n1", nil))
		require.NoError(t, err)
		_, err = c.SyncRefs(ctx, "n1", api.SyncRequest{SyncID: id, Generation: gen, ResourceIDs: ids, Done: true, Echo: echo(a, 0)})
		require.NoError(t, err)
	}
	sync("s1", "gen-a", "sha256:x", "sha256:y")
	sync("s2", "gen-a", "sha256:y", "sha256:z")
	require.Empty(t, refsOf(t, c, "sha256:x"), "a known generation replaces")

	sync("s3", "gen-b") // the state dir was wiped: an empty journal
	require.Equal(t, []string{"n1"}, refsOf(t, c, "sha256:y"), "a new generation drops nothing")
	require.Equal(t, []string{"n1"}, refsOf(t, c, "sha256:z"))
	recs, err := c.store.state.ListMembers(ctx)
	require.NoError(t, err)
	require.Len(t, recs, 1)
	require.Equal(t, "gen-b", recs[0].Generation, "persisted with the member")

	sync("s4", "gen-b", "sha256:z")
	require.Empty(t, refsOf(t, c, "sha256:y"), "the new generation, now known, replaces")
	require.Equal(t, []string{"n1"}, refsOf(t, c, "sha256:z"))
}
