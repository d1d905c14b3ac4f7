package lockserver

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sharedcontent/sharedcontent/lockserver/api"
	"github.com/sharedcontent/sharedcontent/refcount"
)

// olderSync syncs node's whole journal as an older node does (no step,
// offset, echo or generation: an empty chunk announces, the last chunk
// is done).
func olderSync(t *testing.T, c *Coordinator, node, id string, journal ...string) {
	t.Helper()
	ctx := context.Background()
	_, err := c.SyncRefs(ctx, node, api.SyncRequest{SyncID: id, ResourceIDs: []string{}})
	require.NoError(t, err)
	resp, err := c.SyncRefs(ctx, node, api.SyncRequest{SyncID: id, ResourceIDs: journal, Done: true})
	require.NoError(t, err)
	require.True(t, resp.Synced)
}

// TestOlderRenewalKeepsSynced (docs/design.md §10.7): an older node's
// renewal (no instance ID, no echo) within what its last sync vouches for
// (the session that sync was made in, TTL from its answer) keeps it
// synced, extends its session and is answered synced until half the vouch
// has passed; from then on it is answered "not synced" while the node
// still counts as synced, and the sync that follows renews the vouch and,
// its journal unchanged, writes nothing. Past the vouch the node counts as
// unsynced (deletes wait) and its next renewal opens an unsynced session.
// A current node's request without an echo still opens one.
//
// Before: every renewal of an older node opened an unsynced session, so
// it re-sent its journal at each one (every TTL/3) and deletes waited
// meanwhile.
func TestOlderRenewalKeepsSynced(t *testing.T) {
	const ttl = 3 * time.Second
	coord, store := newCountingCoordinator(t, refcount.NewMemoryStorage(), func(c *Config) { c.SessionTTL = ttl })
	clock := useFakeClock(coord)
	ctx := context.Background()
	unused := func(c string) string { return "sha256:" + strings.Repeat(c, 64) }
	older := func() api.SessionResponse {
		t.Helper()
		resp, err := coord.Session(ctx, api.SessionRequest{NodeID: "old"})
		require.NoError(t, err)
		return resp
	}
	deleteUnused := func(c string) error {
		_, err := coord.Lock(ctx, api.LockRequest{Type: api.OperationDelete, ResourceID: unused(c), NodeID: "cur", RequestID: "gc-" + c})
		return err
	}
	cur, err := coord.Session(ctx, api.SessionRequest{NodeID: "cur", InstanceID: "i1"})
	require.NoError(t, err)
	_, err = coord.SyncRefs(ctx, "cur", api.SyncRequest{SyncID: "c1", Done: true, Echo: echo(cur, 0)})
	require.NoError(t, err)

	require.False(t, older().Synced, "the first session opens unsynced")
	olderSync(t, coord, "old", "s1", blob)
	require.True(t, synced(t, coord, "old"))

	// Renewals before half the vouch (1.5 s): synced, nothing to send.
	for _, at := range []time.Duration{500 * time.Millisecond, 1000 * time.Millisecond, 1499 * time.Millisecond} {
		clock.at(at)
		require.True(t, older().Synced, "a renewal at %s, within half the vouch", at)
		require.True(t, synced(t, coord, "old"), "at %s", at)
	}
	// From half the vouch: asked to sync, still synced meanwhile.
	clock.at(2 * time.Second)
	require.False(t, older().Synced, "half the vouch has passed: sync again")
	require.True(t, synced(t, coord, "old"), "still synced while it syncs again")
	require.NoError(t, deleteUnused("c"), "deletes go on: the older node still counts as synced")
	writes := store.commits.Load()
	olderSync(t, coord, "old", "s2", blob)
	require.Equal(t, writes, store.commits.Load(), "an unchanged journal wrote nothing")
	require.Equal(t, []string{"old"}, refsOf(t, coord, blob))
	var ue *api.UnsyncedError
	_, err = coord.Lock(ctx, api.LockRequest{Type: api.OperationDelete, ResourceID: blob, NodeID: "cur", RequestID: "d2"})
	require.ErrorIs(t, err, api.ErrInUse, "the older node's reference still holds its blob")

	// The new sync vouches until 2 s + TTL = 5 s; renewals extend the
	// session, not the vouch.
	clock.at(2500 * time.Millisecond)
	require.True(t, older().Synced)
	clock.at(4900 * time.Millisecond)
	require.False(t, older().Synced)
	require.True(t, synced(t, coord, "old"))
	clock.at(5 * time.Second)
	require.False(t, synced(t, coord, "old"), "past what its last sync proved, the older node is unsynced")
	cur, err = coord.Session(ctx, api.SessionRequest{NodeID: "cur", InstanceID: "i1", Echo: echo(cur, 0)})
	require.Error(t, err, "the current node's echo is too old by now")
	cur, err = coord.Session(ctx, api.SessionRequest{NodeID: "cur", InstanceID: "i1"})
	require.NoError(t, err)
	_, err = coord.SyncRefs(ctx, "cur", api.SyncRequest{SyncID: "c2", Done: true, Echo: echo(cur, 0)})
	require.NoError(t, err)
	require.ErrorAs(t, deleteUnused("d"), &ue)
	require.Equal(t, []string{"old"}, ue.Nodes, "deletes wait for the older node past its vouch")
	require.False(t, older().Synced, "its next renewal opens an unsynced session")
	require.False(t, synced(t, coord, "old"))
	olderSync(t, coord, "old", "s3", blob)
	require.True(t, synced(t, coord, "old"))

	// A current node's request without an echo opens an unsynced session.
	clock.at(5500 * time.Millisecond)
	resp, err := coord.Session(ctx, api.SessionRequest{NodeID: "cur", InstanceID: "i1"})
	require.NoError(t, err)
	require.False(t, resp.Synced)
	require.False(t, synced(t, coord, "cur"))
}

// TestStartGraceAdmitsRecordedMembers (docs/design.md §10.7): within a
// session TTL of a coordinator's start, a recorded member that has had no
// session there yet has its references admitted (a node older than the
// reference rule does not know 409 no_session and would fail its pull);
// it is unsynced meanwhile, so deletes wait for it, and its next sync
// drops what its journal does not hold. A node never recorded is refused,
// and so is the recorded member after that TTL.
//
// Before: every reference of a recorded member was refused until its
// next session at the restarted coordinator.
func TestStartGraceAdmitsRecordedMembers(t *testing.T) {
	const ttl = 3 * time.Second
	ctx := context.Background()
	storage := refcount.NewMemoryStorage()
	first, err := NewCoordinator(func() Config { c := DefaultConfig(); c.SessionTTL = ttl; return c }(), Options{Refs: refcount.NewManager(storage)})
	require.NoError(t, err)
	syncedNode(t, first, "old", blob)
	syncedNode(t, first, "late")
	require.NoError(t, first.Close())

	restarted, _ := newCountingCoordinator(t, storage, func(c *Config) { c.SessionTTL = ttl })
	clock := useFakeClock(restarted)
	require.False(t, synced(t, restarted, "old"))
	pulled := "sha256:" + strings.Repeat("e", 64)
	requireGraceAdmits(t, restarted, pulled, "within a TTL of the start")
	clock.at(restarted.serving.Sub(restarted.started) + ttl)
	_, err = restarted.AddRef(ctx, pulled, "late")
	requireNoSession(t, err, "late")

	// Deletes wait for the unsynced members; the sync drops what the
	// journal does not hold.
	syncedNode(t, restarted, "late")
	var ue *api.UnsyncedError
	_, err = restarted.Lock(ctx, api.LockRequest{Type: api.OperationDelete, ResourceID: "sha256:" + strings.Repeat("f", 64), NodeID: "late"})
	require.ErrorAs(t, err, &ue)
	require.Equal(t, []string{"old"}, ue.Nodes)
	syncedNode(t, restarted, "old", blob)
	require.Empty(t, refsOf(t, restarted, pulled), "the sync replaced the admitted reference its journal does not hold")
	require.Equal(t, []string{"old"}, refsOf(t, restarted, blob))
}

// requireGraceAdmits checks the start grace at c now: the recorded
// member "old", which has had no session at c, has its reference to
// pulled admitted (when says when), and the node "stranger", never
// recorded, is refused.
func requireGraceAdmits(t *testing.T, c *Coordinator, pulled, when string) {
	t.Helper()
	_, err := c.AddRef(context.Background(), pulled, "old")
	require.NoError(t, err, "a recorded member, %s", when)
	require.Equal(t, []string{"old"}, refsOf(t, c, pulled))
	_, err = c.AddRef(context.Background(), pulled, "stranger")
	requireNoSession(t, err, "stranger")
}

// slowLoadStorage is a storage whose members take load to read: its clock
// moves on by load at the first ListMembers (a standby's takeover reading
// a large cluster's state).
type slowLoadStorage struct {
	refcount.Storage
	clock *atomic.Int64 // offset of the coordinator's clock
	load  time.Duration
	once  sync.Once
}

func (s *slowLoadStorage) ListMembers(ctx context.Context) ([]refcount.Member, error) {
	s.once.Do(func() { s.clock.Add(int64(s.load)) })
	return s.Storage.ListMembers(ctx)
}

// TestStartGraceCountsFromServing (docs/design.md §10.7): the start grace
// counts from the moment the coordinator can answer, its state loaded,
// not from its construction: a standby that takes over and spends more
// than a TTL loading the cluster's state still admits, for a TTL after,
// the references of a recorded member that has had no session there yet,
// and refuses them after that TTL. Session answers are still stamped
// with the uptime since the construction.
//
// Before: the grace counted from the construction, so it was over
// before the coordinator's first answer.
func TestStartGraceCountsFromServing(t *testing.T) {
	const ttl = 3 * time.Second
	ctx := context.Background()
	cfg := DefaultConfig()
	cfg.SessionTTL = ttl
	storage := refcount.NewMemoryStorage()
	first, err := NewCoordinator(cfg, Options{Refs: refcount.NewManager(storage)})
	require.NoError(t, err)
	syncedNode(t, first, "old", blob)
	syncedNode(t, first, "late", blob)
	require.NoError(t, first.Close())

	var offset atomic.Int64
	base := time.Now()
	now := func() time.Time { return base.Add(time.Duration(offset.Load())) }
	slow := &slowLoadStorage{Storage: storage, clock: &offset, load: 2 * ttl}
	standby, err := newCoordinator(cfg, Options{Refs: refcount.NewManager(slow)}, now)
	require.NoError(t, err)
	t.Cleanup(func() { standby.Close() })
	require.Equal(t, base, standby.started)
	require.Equal(t, base.Add(2*ttl), standby.serving, "the load took 2 TTLs by the coordinator's clock")

	pulled := "sha256:" + strings.Repeat("e", 64)
	requireGraceAdmits(t, standby, pulled, "2 TTLs after the construction but at once after the load")

	offset.Store(int64(2*ttl + ttl))
	_, err = standby.AddRef(ctx, pulled, "late")
	requireNoSession(t, err, "late")
	require.Equal(t, []string{"old"}, refsOf(t, standby, pulled))

	resp, err := standby.Session(ctx, api.SessionRequest{NodeID: "late", InstanceID: "i1"})
	require.NoError(t, err)
	require.Equal(t, (3 * ttl).Milliseconds(), resp.StampMs, "answers are stamped with the uptime since the construction")
}
