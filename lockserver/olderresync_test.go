package lockserver

import (
	"context"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/sharedcontent/sharedcontent/lockserver/api"
	"github.com/sharedcontent/sharedcontent/refcount"
)

// TestOlderResyncTakesNoSlot (docs/design.md §10.7): while every sync
// slot is taken (max-syncs 1, held here), an older node's re-sync of an
// unchanged journal goes through, writing nothing (full_equal); a re-sync
// whose journal changed is refused busy at its done only, keeps what it
// buffered, and its retry of the done writes once a slot is free. A
// current node's sync, and an older node's first sync, still need a slot.
//
// Before: each request of every sync took a slot, so the older node's
// unchanged re-sync was refused 429 at its announcement.
func TestOlderResyncTakesNoSlot(t *testing.T) {
	coord, store := newCountingCoordinator(t, refcount.NewMemoryStorage(), func(c *Config) { c.MaxSyncs = 1 })
	useFakeClock(coord) // the syncs' timing rule: every done at the time of its session answer
	ctx := context.Background()
	equal := func() float64 { return testutil.ToFloat64(coord.syncs.syncMetrics.syncs.WithLabelValues("full_equal")) }
	pulled := "sha256:" + strings.Repeat("e", 64)

	_, err := coord.Session(ctx, api.SessionRequest{NodeID: "old"})
	require.NoError(t, err)
	_, err = coord.Session(ctx, api.SessionRequest{NodeID: "new"})
	require.NoError(t, err)
	release, err := coord.syncs.admitSync("holder")
	require.NoError(t, err)
	_, err = coord.SyncRefs(ctx, "old", api.SyncRequest{SyncID: "s0", ResourceIDs: []string{}})
	require.ErrorIs(t, err, api.ErrTooManyRequests, "an older node's first sync (it is not synced) takes a slot")
	release()
	olderSync(t, coord, "old", "s1", blob)

	release, err = coord.syncs.admitSync("holder")
	require.NoError(t, err)
	writes, before := store.commits.Load(), equal()
	olderSync(t, coord, "old", "s2", blob)
	require.Equal(t, writes, store.commits.Load(), "an unchanged re-sync wrote nothing")
	require.Equal(t, before+1, equal())
	require.True(t, synced(t, coord, "old"))

	_, err = coord.SyncRefs(ctx, "old", api.SyncRequest{SyncID: "s3", ResourceIDs: []string{}})
	require.NoError(t, err, "the announcement of a re-sync takes no slot")
	done := api.SyncRequest{SyncID: "s3", ResourceIDs: []string{blob, pulled}, Done: true}
	_, err = coord.SyncRefs(ctx, "old", done)
	require.ErrorIs(t, err, api.ErrTooManyRequests, "a re-sync that writes needs a slot for its done")
	require.Empty(t, refsOf(t, coord, pulled), "the refused done wrote nothing")
	require.True(t, synced(t, coord, "old"), "a refused re-sync leaves its node synced")
	_, err = coord.SyncRefs(ctx, "new", api.SyncRequest{SyncID: "n1", ResourceIDs: []string{}, Step: api.SyncStepAnnounce, Offset: new(int)})
	require.ErrorIs(t, err, api.ErrTooManyRequests, "a current node's sync takes a slot")

	release()
	resp, err := coord.SyncRefs(ctx, "old", done)
	require.NoError(t, err, "the retry of the done, with a slot free")
	require.True(t, resp.Synced)
	require.Equal(t, 2, resp.Received)
	require.Equal(t, []string{"old"}, refsOf(t, coord, pulled))
	require.Equal(t, before+1, equal(), "the changed journal was written")
	release, err = coord.syncs.admitSync("holder")
	require.NoError(t, err)
	resp, err = coord.SyncRefs(ctx, "old", done)
	require.NoError(t, err, "a retry of the done (its answer lost) is answered again without a slot")
	require.True(t, resp.Synced)
	release()
	_, err = coord.syncs.admitSync("holder")
	require.NoError(t, err, "the done's slot was given back")
}
