package lockserver

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sharedcontent/sharedcontent/lockserver/api"
	"github.com/sharedcontent/sharedcontent/refcount"
)

// Deletes are remembered (docs/design.md §8.9): the stale-view refusal (AddFoundRef
// answered deleting) survives a restart of the coordinator, and a delete
// whose holder went without an unlock counts as completed. Each of these
// tests but the last fails on d6d7306, where completions lived in memory
// only and a lapsed delete left none.

func never(refcount.Write) bool { return false }

// deleteBlob deletes blob as node, granted and unlocked with success.
func deleteBlob(t *testing.T, c *Coordinator, node string) (fence uint64) {
	t.Helper()
	d := mustLock(t, c, api.OperationDelete, node)
	require.True(t, d.Acquired)
	unlock(t, c, api.OperationDelete, d.LeaseID, true)
	return d.Fence
}

// waitReleased waits until the delete of blob has no holder.
func waitReleased(t *testing.T, c *Coordinator) {
	t.Helper()
	require.Eventually(t, func() bool {
		st, err := c.Status(context.Background(), api.OperationDelete, blob, "", "")
		return err == nil && st.Holder == nil
	}, 30*time.Second, 5*time.Millisecond)
}

func persistedDeletes(t *testing.T, c *Coordinator) refcount.Deletes {
	t.Helper()
	d, err := c.store.state.Deletes(context.Background())
	require.NoError(t, err)
	return d
}

// TestDeleteCompletionSurvivesRestart: after a restart, a node that found
// the deleted blob is still refused; a committing reference ends that,
// on disk too.
func TestDeleteCompletionSurvivesRestart(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "db")
	c, _, stop := startOn(t, path, never)
	members(t, c, "n1", "n2", "n3")
	_, err := c.AddRef(ctx, blob, "n1")
	require.NoError(t, err)
	fence := deleteBlob(t, c, "n1")
	stop()

	c, _, stop = startOn(t, path, never)

	members(t, c, "n1", "n2", "n3")
	st, err := c.Status(ctx, api.OperationDelete, blob, "", "")
	require.NoError(t, err)
	require.NotNil(t, st.Completed)
	require.Equal(t, fence, st.Completed.Fence,
		"the completion still names the delete's fence: a deleter whose answer was lost in the restart unlinks by it (docs/design.md §8.11)")
	require.False(t, st.Completed.Lapsed)
	_, err = c.AddFoundRef(ctx, blob, "n2")
	require.ErrorIs(t, err, api.ErrDeleting, "the restarted coordinator forgot the delete")
	require.Empty(t, refsOf(t, c, blob), "the refusal records nothing")
	require.Empty(t, persistedDeletes(t, c).InFlight)

	_, err = c.AddRef(ctx, blob, "n3") // a committing node: the blob is back
	require.NoError(t, err)
	require.Empty(t, persistedDeletes(t, c).Completed, "the reference ended the completion on disk")
	stop()
	c, _, _ = startOn(t, path, never)
	members(t, c, "n1", "n2")
	syncedNode(t, c, "n3", blob) // its journal has the blob
	_, err = c.AddFoundRef(ctx, blob, "n2")
	require.NoError(t, err)
	require.Equal(t, []string{"n2", "n3"}, refsOf(t, c, blob))
}

// TestPullEndsDeleteCompletionOnDisk: a successful pull ends the
// completion in the same transaction as its reference.
func TestPullEndsDeleteCompletionOnDisk(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "db")
	c, _, stop := startOn(t, path, never)
	members(t, c, "n1", "n2")
	deleteBlob(t, c, "n1")
	require.Contains(t, persistedDeletes(t, c).Completed, blob)
	p := mustLock(t, c, api.OperationPull, "n1")
	require.True(t, p.Acquired)
	unlock(t, c, api.OperationPull, p.LeaseID, true)
	require.Empty(t, persistedDeletes(t, c).Completed)
	stop()
	c, _, _ = startOn(t, path, never)
	members(t, c, "n1", "n2")
	_, err := c.AddFoundRef(ctx, blob, "n2")
	require.NoError(t, err)
}

// TestLapsedDeleteIsACompletion: the deleter died after its rename (no
// unlock); its lease lapses. A node that still sees the blob is refused,
// also after a restart; nobody skips on it: a pull downloads again, a new
// delete runs.
func TestLapsedDeleteIsACompletion(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "db")
	short := func(c *Config) { c.LeaseTTL, c.ClaimTimeout = 50*time.Millisecond, 50*time.Millisecond }
	coord, _, stop := startOn(t, path, never, short)
	members(t, coord, "n1", "n2")
	p := mustLock(t, coord, api.OperationPull, "n1")
	unlock(t, coord, api.OperationPull, p.LeaseID, true) // a retained pull completion
	d := mustLock(t, coord, api.OperationDelete, "n1")
	require.True(t, d.Acquired)
	m, ok := persistedDeletes(t, coord).InFlight[blob]
	require.True(t, ok, "the grant is on disk before it is answered")
	require.Equal(t, "n1", m.Node)
	require.Equal(t, d.Fence, m.Fence)
	waitReleased(t, coord)

	_, err := coord.AddFoundRef(ctx, blob, "n2")
	require.ErrorIs(t, err, api.ErrDeleting, "a lapsed delete may have removed the blob")
	require.ErrorContains(t, err, "lapsed")
	dd := persistedDeletes(t, coord)
	require.Empty(t, dd.InFlight)
	require.True(t, dd.Completed[blob].Lapsed)
	st, err := coord.Status(ctx, api.OperationDelete, blob, "", "")
	require.NoError(t, err)
	require.NotNil(t, st.Completed)
	require.Equal(t, &api.Completion{NodeID: "n1", CompletedAt: st.Completed.CompletedAt, Fence: d.Fence, Lapsed: true}, st.Completed,
		"a node's reaper sees the lapse and its fence: it restores the trash entry (docs/design.md §8.11)")
	pull := mustLock(t, coord, api.OperationPull, "n2")
	require.False(t, pull.Skip, "the blob may be gone: a pull must not skip")
	require.True(t, pull.Acquired)
	// Given back, or the next coordinator adopts it (leases.go) and the
	// delete below queues behind it.
	require.NoError(t, coord.Cancel(ctx, api.CancelRequest{Type: api.OperationPull, ResourceID: blob, NodeID: "n2", RequestID: pull.RequestID}))
	stop()

	coord, _, _ = startOn(t, path, never, short)

	members(t, coord, "n1", "n2")
	_, err = coord.AddFoundRef(ctx, blob, "n2")
	require.ErrorIs(t, err, api.ErrDeleting, "also after a restart")
	again := mustLock(t, coord, api.OperationDelete, "n1")
	require.False(t, again.Skip, "a lapsed delete is no reason to skip the next one")
	require.True(t, again.Acquired)
}

// TestDeleteGrantedAtStopIsACompletion: the coordinator stopped while a
// delete was granted (its holder may have renamed the blob away); at
// start the marker counts as a completion.
func TestDeleteGrantedAtStopIsACompletion(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "db")
	c, _, stop := startOn(t, path, never)
	require.True(t, mustLock(t, c, api.OperationDelete, "n1").Acquired)
	stop()

	c, _, _ = startOn(t, path, never)
	_, err := c.AddFoundRef(ctx, blob, "n2")
	require.ErrorIs(t, err, api.ErrDeleting)
	dd := persistedDeletes(t, c)
	require.Empty(t, dd.InFlight, "the marker became a completion")
	require.True(t, dd.Completed[blob].Lapsed)
}

// TestDeleteRetentionCountsFromStart: a completion older than
// completed_ttl by the wall clock (the coordinator was down for a
// weekend) is retained for completed_ttl from the coordinator's start.
func TestDeleteRetentionCountsFromStart(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "db")
	s, err := refcount.OpenBoltStorage(path)
	require.NoError(t, err)
	weekend := time.Now().Add(-60 * time.Hour)
	require.NoError(t, s.Commit(ctx, new(refcount.Batch).PutDeleted(blob, refcount.DeleteCompletion{Node: "n1", At: weekend})))
	require.NoError(t, s.Close())

	c, _, _ := startOn(t, path, never)
	_, err = c.AddFoundRef(ctx, blob, "n2")
	require.ErrorIs(t, err, api.ErrDeleting, "60 h of wall time passed while the coordinator was down")
}

// TestDeleteCompletionsArePruned: once completed_ttl has passed, the
// completion is dropped from the database too.
func TestDeleteCompletionsArePruned(t *testing.T) {
	ctx := context.Background()
	ttl := 50 * time.Millisecond
	coord, _, _ := startOn(t, filepath.Join(t.TempDir(), "db"), never, func(c *Config) { c.CompletedTTL = ttl })
	members(t, coord, "n1", "n2")
	before := time.Now() // the completion is recorded after this
	deleteBlob(t, coord, "n1")
	require.Contains(t, persistedDeletes(t, coord).Completed, blob)
	require.Eventually(t, func() bool { return len(persistedDeletes(t, coord).Completed) == 0 }, 30*time.Second, 5*time.Millisecond)
	require.GreaterOrEqual(t, time.Since(before), ttl, "pruned before completed_ttl")
	_, err := coord.AddFoundRef(ctx, blob, "n2")
	require.NoError(t, err)
}
