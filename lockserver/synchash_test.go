package lockserver

import (
	"context"
	"fmt"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sharedcontent/sharedcontent/internal/synchash"
	"github.com/sharedcontent/sharedcontent/lockserver/api"
	"github.com/sharedcontent/sharedcontent/refcount"
)

// countingStorage counts the Commits that write something.
type countingStorage struct {
	refcount.Storage
	commits atomic.Int64
}

func (s *countingStorage) Commit(ctx context.Context, b *refcount.Batch) error {
	if b.Len() > 0 {
		s.commits.Add(1)
	}
	return s.Storage.Commit(ctx, b)
}

// hashNode is a node that syncs by hash, as contentv2/remote does, against
// a Coordinator called directly. It counts its requests.
type hashNode struct {
	t        *testing.T
	coord    *Coordinator
	id, gen  string
	requests int
}

func (n *hashNode) call(req api.SyncRequest) (api.SyncResponse, error) {
	n.requests++
	req.Generation = n.gen
	return n.coord.SyncRefs(context.Background(), n.id, req)
}

// sync runs one sync of journal: announce, whole hash, bucket hashes, the
// differing buckets' IDs. It returns the buckets the coordinator asked
// for (nil when the whole hash matched).
func (n *hashNode) sync(syncID string, journal ...string) []int {
	t := n.t
	t.Helper()
	zero := 0
	resp, err := n.call(api.SyncRequest{SyncID: syncID, ResourceIDs: []string{}, Offset: &zero})
	require.NoError(t, err)
	require.True(t, resp.ByHash)
	table := synchash.FromIDs(journal)
	whole := api.SyncHash(table.Whole())
	resp, err = n.call(api.SyncRequest{SyncID: syncID, Offset: &zero, Hash: &whole, Echo: echoOf(n.coord, n.id)})
	require.NoError(t, err)
	if resp.Synced {
		return nil
	}
	resp, err = n.call(api.SyncRequest{SyncID: syncID, Offset: &zero, BucketHashes: wireBuckets(table)})
	require.NoError(t, err)
	buckets := resp.Buckets
	differ := map[int]bool{}
	for _, b := range resp.Buckets {
		differ[b] = true
	}
	var ids []string
	for _, id := range journal {
		if differ[synchash.Bucket(id)] {
			ids = append(ids, id)
		}
	}
	resp, err = n.call(api.SyncRequest{SyncID: syncID, ResourceIDs: ids, Offset: &zero, Done: true, Echo: echoOf(n.coord, n.id)})
	require.NoError(t, err)
	require.True(t, resp.Synced)
	return buckets
}

// reopen drops n's session (a coordinator restart or a lapse looks the
// same to the sync): the next session, echoing an answer of another
// epoch as a node does after a restart, opens unsynced.
func reopen(t *testing.T, c *Coordinator, node string) {
	t.Helper()
	resp, err := c.Session(context.Background(), api.SessionRequest{NodeID: node, Echo: &api.Echo{Epoch: c.Cluster().Epoch + 1}})
	require.NoError(t, err)
	require.False(t, resp.Synced)
}

func ids(n int, prefix string) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("sha256:%s%04d", prefix, i)
	}
	return out
}

func newCountingCoordinator(t *testing.T, s refcount.Storage, mutate ...func(*Config)) (*Coordinator, *countingStorage) {
	t.Helper()
	cs := &countingStorage{Storage: s}
	cfg := DefaultConfig()
	for _, m := range mutate {
		m(&cfg)
	}
	c, err := NewCoordinator(cfg, Options{Refs: refcount.NewManager(cs)})
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	return c, cs
}

// TestSyncByHashUnchanged: a node whose journal equals the coordinator's
// record syncs with one request after the announcement, and nothing is
// written.
func TestSyncByHashUnchanged(t *testing.T) {
	c, store := newCountingCoordinator(t, refcount.NewMemoryStorage())
	journal := ids(300, "a")
	session(t, c, "n1")
	n := &hashNode{t: t, coord: c, id: "n1", gen: "g1"}
	// The first sync of generation g1 goes in full (the member record has
	// no generation yet): the announcement says so.
	zero := 0
	resp, err := n.call(api.SyncRequest{SyncID: "s0", ResourceIDs: []string{}, Offset: &zero})
	require.NoError(t, err)
	require.False(t, resp.ByHash, "another generation: a full sync, which only adds")
	resp, err = n.call(api.SyncRequest{SyncID: "s0", ResourceIDs: journal, Offset: &zero, Done: true, Echo: echoOf(c, "n1")})
	require.NoError(t, err)
	require.True(t, resp.Synced)
	// The last chunk's answer was lost: its retry is answered again.
	resp, err = n.call(api.SyncRequest{SyncID: "s0", ResourceIDs: journal, Offset: &zero, Done: true, Echo: echoOf(c, "n1")})
	require.NoError(t, err)
	require.True(t, resp.Synced)
	require.Equal(t, len(journal), resp.Received)

	reopen(t, c, "n1")
	before := store.commits.Load()
	n.requests = 0
	require.Nil(t, n.sync("s1", journal...), "the whole hash matched")
	require.Equal(t, 2, n.requests, "the announcement and the hash")
	require.Equal(t, before, store.commits.Load(), "nothing written")
	require.True(t, session(t, c, "n1").Synced)

	// The hash's answer was lost: its retry is answered again, synced.
	whole := api.SyncHash(synchash.FromIDs(journal).Whole())
	zero = 0
	resp, err = n.call(api.SyncRequest{SyncID: "s1", Offset: &zero, Hash: &whole, Echo: echoOf(c, "n1")})
	require.NoError(t, err)
	require.True(t, resp.Synced)
	require.Equal(t, before, store.commits.Load())
}

// TestSyncByHashChangedBuckets: a node whose journal differs sends only
// the resource IDs of the buckets whose hashes differ, and only those
// buckets are replaced; the node's record then equals its journal.
func TestSyncByHashChangedBuckets(t *testing.T) {
	c, _ := newCountingCoordinator(t, refcount.NewMemoryStorage())
	ctx := context.Background()
	journal := ids(1000, "b")
	session(t, c, "n1")
	n := &hashNode{t: t, coord: c, id: "n1", gen: "g1"}
	syncFull(t, c, "n1", "g1", journal)

	// While the coordinator was "down": the node dropped journal[0] and
	// added one; the coordinator kept a reference the node no longer has.
	gone, added := journal[0], "sha256:new"
	journal = append(journal[1:], added)
	reopen(t, c, "n1")
	buckets := n.sync("s1", journal...)
	want := map[int]bool{synchash.Bucket(gone): true, synchash.Bucket(added): true}
	require.Len(t, buckets, len(want))
	for _, b := range buckets {
		require.True(t, want[b], "bucket %d did not change", b)
	}
	require.Empty(t, refsOf(t, c, gone))
	require.Equal(t, []string{"n1"}, refsOf(t, c, added))
	require.Equal(t, []string{"n1"}, refsOf(t, c, journal[500]), "a reference of an unchanged bucket stays")
	kept, ok := c.refs.NodeHash("n1")
	require.True(t, ok)
	require.Equal(t, *synchash.FromIDs(journal), kept)
	require.True(t, session(t, c, "n1").Synced)

	// A chunk with a resource ID of a bucket that was not asked for is
	// refused.
	reopen(t, c, "n1")
	zero := 0
	_, err := n.call(api.SyncRequest{SyncID: "s2", ResourceIDs: []string{}, Offset: &zero})
	require.NoError(t, err)
	table := synchash.FromIDs(journal[1:])
	_, err = n.call(api.SyncRequest{SyncID: "s2", Offset: &zero, BucketHashes: wireBuckets(table)})
	require.NoError(t, err)
	other := journal[500]
	if synchash.Bucket(other) == synchash.Bucket(journal[0]) {
		other = journal[501]
	}
	_, err = n.call(api.SyncRequest{SyncID: "s2", ResourceIDs: []string{other}, Offset: &zero})
	require.ErrorIs(t, err, api.ErrInvalidArgument)
	_ = ctx
}

// syncFull syncs journal in full, as an older node does (no hash).
func syncFull(t *testing.T, c *Coordinator, node, gen string, journal []string) {
	t.Helper()
	for len(journal) > 0 {
		k := min(len(journal), api.MaxSyncChunk)
		req := api.SyncRequest{SyncID: "full-" + gen, ResourceIDs: journal[:k], Generation: gen, Done: k == len(journal)}
		if req.Done {
			req.Echo = echoOf(c, node)
		}
		_, err := c.SyncRefs(context.Background(), node, req)
		require.NoError(t, err)
		journal = journal[k:]
	}
}

// TestSyncByHashAfterRestart: a coordinator restarted on the same database
// builds the hashes again, and an unchanged node syncs by hash; the
// hashes follow the node's own adds and drops and a delete's completion.
func TestSyncByHashAfterRestart(t *testing.T) {
	path := filepath.Join(t.TempDir(), "refs.db")
	open := func() (*Coordinator, *countingStorage) {
		s, err := refcount.OpenBoltStorage(path)
		require.NoError(t, err)
		c, cs := newCountingCoordinator(t, s)
		t.Cleanup(func() { s.Close() })
		return c, cs
	}
	c, _ := open()
	ctx := context.Background()
	journal := ids(50, "c")
	session(t, c, "n1")
	syncFull(t, c, "n1", "g1", journal)
	// Changes after the sync: an add, a drop (the node's own release of
	// a delete), and another node's reference.
	_, err := c.AddRef(ctx, "sha256:later", "n1")
	require.NoError(t, err)
	journal = append(journal, "sha256:later")
	session(t, c, "n2")
	_, err = c.AddRef(ctx, journal[3], "n2")
	require.NoError(t, err)
	require.NoError(t, c.Close())
	require.NoError(t, c.refs.Storage().Close())

	c, store := open()
	session(t, c, "n1")
	before := store.commits.Load()
	n := &hashNode{t: t, coord: c, id: "n1", gen: "g1"}
	require.Nil(t, n.sync("s1", journal...))
	require.Equal(t, before, store.commits.Load())
	kept, _ := c.refs.NodeHash("n2")
	require.Equal(t, *synchash.FromIDs([]string{journal[3]}), kept)

	// Forget drops the hash with the references.
	reopen(t, c, "n2")
	require.NoError(t, c.Close())
}

// TestSyncBusy: syncs beyond MaxSyncs are refused with a BusyError (429,
// Retry-After) at once, and session calls go on meanwhile.
func TestSyncBusy(t *testing.T) {
	coord, _ := newCountingCoordinator(t, refcount.NewMemoryStorage(), func(c *Config) { c.MaxSyncs = 1 })
	session(t, coord, "n1")
	release, err := coord.syncs.admitSync("other")
	require.NoError(t, err)
	_, err = coord.SyncRefs(context.Background(), "n1", api.SyncRequest{SyncID: "s1", ResourceIDs: []string{}})
	require.ErrorIs(t, err, api.ErrTooManyRequests)
	var busy *BusyError
	require.ErrorAs(t, err, &busy)
	require.Positive(t, busy.RetryAfter)
	status, _ := api.HTTPStatus(err)
	require.Equal(t, 429, status)
	session(t, coord, "n1") // a session call takes no sync slot
	release()
	syncRefs(t, coord, "n1", "s1", true, blob)
	require.True(t, session(t, coord, "n1").Synced)
}

// TestSyncBufferBoundAndTimeout: the unfinished syncs' buffers are bounded
// cluster-wide: a chunk past the bound is refused (429) and buffers
// nothing, then sent again once room is made, and the sync resumes where
// it was; an unfinished sync idle for SyncTimeout is dropped, and its
// node must start it again.
func TestSyncBufferBoundAndTimeout(t *testing.T) {
	var clock atomic.Int64
	start := time.Now()
	now := func() time.Time { return start.Add(time.Duration(clock.Load())) }
	cfg := DefaultConfig()
	cfg.MaxSyncBuffer = api.MaxSyncChunk + 10
	cfg.SyncTimeout = time.Hour // the sweeper stays out of the way
	cfg.SessionTTL = 4 * time.Hour
	c, err := newCoordinator(cfg, Options{Refs: refcount.NewManager(refcount.NewMemoryStorage())}, now)
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	ctx := context.Background()
	session(t, c, "big")
	session(t, c, "small")
	off := func(n int) *int { return &n }
	// big buffers one full chunk, unfinished.
	_, err = c.SyncRefs(ctx, "big", api.SyncRequest{SyncID: "b", ResourceIDs: []string{}, Offset: off(0)})
	require.NoError(t, err)
	_, err = c.SyncRefs(ctx, "big", api.SyncRequest{SyncID: "b", ResourceIDs: ids(api.MaxSyncChunk, "d"), Offset: off(0)})
	require.NoError(t, err)
	// small fits 10, not 20.
	_, err = c.SyncRefs(ctx, "small", api.SyncRequest{SyncID: "s", ResourceIDs: []string{}, Offset: off(0)})
	require.NoError(t, err)
	resp, err := c.SyncRefs(ctx, "small", api.SyncRequest{SyncID: "s", ResourceIDs: ids(10, "e"), Offset: off(0)})
	require.NoError(t, err)
	require.Equal(t, 10, resp.Received)
	more := ids(20, "f")
	_, err = c.SyncRefs(ctx, "small", api.SyncRequest{SyncID: "s", ResourceIDs: more, Offset: off(10)})
	var busy *BusyError
	require.ErrorAs(t, err, &busy, "past the cluster-wide bound")
	c.mmu.Lock()
	require.Equal(t, api.MaxSyncChunk+10, c.syncs.syncLimits.buffered, "the refused chunk buffered nothing")
	c.mmu.Unlock()

	// big goes quiet for SyncTimeout: the next chunk past the bound drops
	// it, and small's chunk, sent again, resumes small's sync.
	clock.Add(int64(time.Hour))
	resp, err = c.SyncRefs(ctx, "small", api.SyncRequest{SyncID: "s", ResourceIDs: more, Offset: off(10), Done: true})
	require.NoError(t, err)
	require.True(t, resp.Synced)
	require.Equal(t, 30, resp.Received)
	_, err = c.SyncRefs(ctx, "big", api.SyncRequest{SyncID: "b", ResourceIDs: ids(1, "g"), Offset: off(api.MaxSyncChunk)})
	require.ErrorIs(t, err, api.ErrNotFound, "big's sync was dropped: it starts again")
	c.mmu.Lock()
	require.Zero(t, c.syncs.syncLimits.buffered)
	c.mmu.Unlock()
}

func wireBuckets(t *synchash.Table) []api.SyncHash {
	out := make([]api.SyncHash, len(t))
	for i, b := range t {
		out[i] = api.SyncHash(b)
	}
	return out
}

// TestSyncChunkOffsetChecked: every chunk of a continuing sync declares
// the resource IDs sent before it; one out of place (a done at offset
// 999999 after 5 IDs, a chunk at 3) is refused as an invalid argument and
// changes nothing: the node's references stay, it is not synced, and the
// sync goes on from where it was. A retry of the last chunk (its answer
// lost) is taken again.
//
// Before: the done at offset 999999 was accepted and replaced the node's
// references with the 5 IDs.
func TestSyncChunkOffsetChecked(t *testing.T) {
	c := newTestCoordinator(t)
	ctx := context.Background()
	a := syncedNode(t, c, "n1", "sha256:old")
	a, err := c.Session(ctx, api.SessionRequest{NodeID: "n1", Echo: &api.Echo{Epoch: a.Epoch + 1}}) // a new session: n1 syncs again
	require.NoError(t, err)
	ids := []string{"sha256:a", "sha256:b", "sha256:c", "sha256:d", "sha256:e"}
	at := func(o int) *int { return &o }
	_, err = c.SyncRefs(ctx, "n1", api.SyncRequest{SyncID: "s2", ResourceIDs: []string{}, Offset: at(0)})
	require.NoError(t, err)
	_, err = c.SyncRefs(ctx, "n1", api.SyncRequest{SyncID: "s2", ResourceIDs: ids, Offset: at(0)})
	require.NoError(t, err)
	_, err = c.SyncRefs(ctx, "n1", api.SyncRequest{SyncID: "s2", ResourceIDs: ids, Offset: at(0)})
	require.NoError(t, err, "a retry of the last chunk")

	for _, bad := range []api.SyncRequest{
		{SyncID: "s2", Done: true, Offset: at(999999), Echo: echo(a, 0)},
		{SyncID: "s2", ResourceIDs: []string{"sha256:f"}, Offset: at(3)},
		{SyncID: "s2", ResourceIDs: []string{"sha256:f"}, Done: true, Offset: at(6), Echo: echo(a, 0)},
	} {
		_, err = c.SyncRefs(ctx, "n1", bad)
		require.ErrorIs(t, err, api.ErrInvalidArgument, "offset %d", *bad.Offset)
		require.ErrorContains(t, err, "received 5 resource IDs")
		require.False(t, synced(t, c, "n1"))
		require.Equal(t, []string{"n1"}, refsOf(t, c, "sha256:old"), "nothing changed")
		require.Empty(t, refsOf(t, c, "sha256:a"))
	}
	resp, err := c.SyncRefs(ctx, "n1", api.SyncRequest{SyncID: "s2", ResourceIDs: []string{"sha256:f"}, Done: true, Offset: at(5), Echo: echo(a, 0)})
	require.NoError(t, err, "the sync goes on where it was")
	require.True(t, resp.Synced)
	require.Empty(t, refsOf(t, c, "sha256:old"))
	require.Equal(t, []string{"n1"}, refsOf(t, c, "sha256:f"))
}
