package lockserver

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sharedcontent/sharedcontent/internal/synchash"
	"github.com/sharedcontent/sharedcontent/lockserver/api"
)

func at(offset int) *int { return &offset }

// TestSyncStepsNamed: a sync whose requests name their steps (as
// contentv2 sends them): announce, chunks, done; then a sync by hash
// that ends at its equal hash step, writing nothing and leaving the node
// synced.
func TestSyncStepsNamed(t *testing.T) {
	c := newTestCoordinator(t)
	ctx := context.Background()
	ids := []string{"sha256:one", "sha256:two", "sha256:three"}
	session(t, c, "n1")
	resp, err := c.SyncRefs(ctx, "n1", api.SyncRequest{Step: api.SyncStepAnnounce, SyncID: "s1", ResourceIDs: []string{}, Offset: at(0)})
	require.NoError(t, err)
	require.False(t, resp.Synced)
	resp, err = c.SyncRefs(ctx, "n1", api.SyncRequest{Step: api.SyncStepChunk, SyncID: "s1", ResourceIDs: ids[:2], Offset: at(0)})
	require.NoError(t, err)
	require.Equal(t, 2, resp.Received)
	require.False(t, synced(t, c, "n1"))
	resp, err = c.SyncRefs(ctx, "n1", api.SyncRequest{Step: api.SyncStepDone, SyncID: "s1", ResourceIDs: ids[2:], Offset: at(2), Done: true, Echo: echoOf(c, "n1")})
	require.NoError(t, err)
	require.True(t, resp.Synced)
	require.Equal(t, 3, resp.Received)
	for _, id := range ids {
		require.Equal(t, []string{"n1"}, refsOf(t, c, id))
	}

	resp, err = c.SyncRefs(ctx, "n1", api.SyncRequest{Step: api.SyncStepAnnounce, SyncID: "s2", ResourceIDs: []string{}, Offset: at(0)})
	require.NoError(t, err)
	require.True(t, resp.ByHash)
	whole := api.SyncHash(synchash.FromIDs(ids).Whole())
	resp, err = c.SyncRefs(ctx, "n1", api.SyncRequest{Step: api.SyncStepHash, SyncID: "s2", Offset: at(0), Hash: &whole, Echo: echoOf(c, "n1")})
	require.NoError(t, err)
	require.True(t, resp.Synced)
	require.True(t, synced(t, c, "n1"))
}

// TestSyncStepContradicted: a request whose named step its fields
// contradict (an older coordinator would read another step from them),
// or that names no known step, is an invalid argument that changes
// nothing: the sync it belongs to goes on where it was.
func TestSyncStepContradicted(t *testing.T) {
	c := newTestCoordinator(t)
	ctx := context.Background()
	session(t, c, "n1")
	_, err := c.SyncRefs(ctx, "n1", api.SyncRequest{Step: api.SyncStepAnnounce, SyncID: "s1", ResourceIDs: []string{}, Offset: at(0)})
	require.NoError(t, err)
	whole := api.SyncHash{Count: 1, Hash: 7}
	for name, req := range map[string]api.SyncRequest{
		"done without done":      {Step: api.SyncStepDone, ResourceIDs: []string{blob}, Offset: at(0)},
		"announce with IDs":      {Step: api.SyncStepAnnounce, ResourceIDs: []string{blob}, Offset: at(0)},
		"announce at offset 1":   {Step: api.SyncStepAnnounce, Offset: at(1)},
		"chunk that is done":     {Step: api.SyncStepChunk, ResourceIDs: []string{blob}, Offset: at(0), Done: true},
		"chunk with a hash":      {Step: api.SyncStepChunk, Offset: at(0), Hash: &whole},
		"hash step without hash": {Step: api.SyncStepHash, Offset: at(0)},
		"unknown step":           {Step: "finish", ResourceIDs: []string{blob}, Offset: at(0), Done: true},
	} {
		req.SyncID = "s1"
		_, err := c.SyncRefs(ctx, "n1", req)
		require.ErrorIs(t, err, api.ErrInvalidArgument, name)
		require.ErrorContains(t, err, "n1", name)
	}
	require.Empty(t, refsOf(t, c, blob))
	require.False(t, synced(t, c, "n1"))
	resp, err := c.SyncRefs(ctx, "n1", api.SyncRequest{Step: api.SyncStepDone, SyncID: "s1", ResourceIDs: []string{blob}, Offset: at(0), Done: true, Echo: echoOf(c, "n1")})
	require.NoError(t, err, "the sync goes on where it was")
	require.True(t, resp.Synced)
	require.Equal(t, []string{"n1"}, refsOf(t, c, blob))
}

// TestSyncStepOnlyAnnounceStarts: a named chunk of an unknown sync does
// not start one, even empty at offset 0 (an older node's request of that
// shape is its announcement, and still starts it).
func TestSyncStepOnlyAnnounceStarts(t *testing.T) {
	c := newTestCoordinator(t)
	ctx := context.Background()
	session(t, c, "n1")
	_, err := c.SyncRefs(ctx, "n1", api.SyncRequest{Step: api.SyncStepChunk, SyncID: "s1", ResourceIDs: []string{}, Offset: at(0)})
	require.ErrorIs(t, err, api.ErrNotFound)
	_, err = c.SyncRefs(ctx, "n1", api.SyncRequest{Step: api.SyncStepDone, SyncID: "s1", Offset: at(0), Done: true, Echo: echoOf(c, "n1")})
	require.ErrorIs(t, err, api.ErrNotFound)
	require.False(t, synced(t, c, "n1"))

	// An older node: no step; its empty request at offset 0 announces.
	resp, err := c.SyncRefs(ctx, "n1", api.SyncRequest{SyncID: "s2", ResourceIDs: []string{}, Offset: at(0)})
	require.NoError(t, err)
	require.True(t, resp.ByHash)
	resp, err = c.SyncRefs(ctx, "n1", api.SyncRequest{SyncID: "s2", ResourceIDs: []string{blob}, Offset: at(0), Done: true, Echo: echoOf(c, "n1")})
	require.NoError(t, err)
	require.True(t, resp.Synced)
	require.Equal(t, []string{"n1"}, refsOf(t, c, blob))
}
