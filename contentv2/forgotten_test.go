package contentv2

import (
	"bytes"
	"context"
	"os"
	"testing"

	"github.com/containerd/containerd/v2/core/content"
	"github.com/opencontainers/go-digest"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
)

// hangRoot makes s's root probes fail as a probe that timed out does, and
// returns what puts the real probe back.
func hangRoot(s *store) (restore func()) {
	s.rootw.mu.Lock()
	defer s.rootw.mu.Unlock()
	probe := s.rootw.probeFn
	s.rootw.probeFn = func(root string, _ rootIdentity, _ bool) error {
		return (&rootWatch{root: root}).unready(rootHung, "not answering within the probe timeout", "check the shared storage", nil)
	}
	return func() {
		s.rootw.mu.Lock()
		defer s.rootw.mu.Unlock()
		s.rootw.probeFn = probe
	}
}

// pull writes the blob of s through cs as containerd's fetch does, and
// returns its digest.
func pull(ctx context.Context, t *testing.T, cs content.Store, s string) digest.Digest {
	t.Helper()
	data, desc := testBlob(s)
	require.NoError(t, content.WriteBlob(ctx, cs, "layer-"+desc.Digest.String(), bytes.NewReader(data), desc))
	return desc.Digest
}

// syncsSince returns the syncs of log after its first n calls.
func syncsSince(log []fakeCall, n int) []fakeCall { return calls(log[n:], "SyncRefs") }

// TestForgottenCleanupWaitsForTheRoot (docs/design.md §8.13): node 3 comes
// back after being forgotten, and one of its blobs was deleted meanwhile,
// while its shared root does not answer. It keeps every blob and does not
// sync (a sync would re-register the deleted blob), round after round;
// once the root answers, the next round drops the deleted blob from its
// journal, reports it, and syncs only the one that exists.
func TestForgottenCleanupWaitsForTheRoot(t *testing.T) {
	ctx := context.Background()
	c := newFakeCluster(longTTL)
	s := fakeStore(t, c, t.TempDir(), "node-3")
	kept, lost := pull(ctx, t, s, "kept"), pull(ctx, t, s, "lost")
	awaitJoined(t, s, c)

	c.forget("node-3")
	require.NoError(t, os.Remove(s.blobPath(lost)), "another node's GC deleted it")
	restore := hangRoot(s)
	forgotAt := len(c.recorded())
	require.True(t, kick(t, s, c).Answer.NewMember, "the coordinator had forgotten node 3")
	kick(t, s, c) // the round above has ended; this one finds the root hung too
	require.Equal(t, 1.0, testutil.ToFloat64(s.metrics.forgotten), "node 3 says it was forgotten, once")
	require.Zero(t, testutil.ToFloat64(s.metrics.forgottenGone))
	require.True(t, s.journal.has(lost), "a root that does not answer is no evidence of a missing blob")
	require.Equal(t, c.id, s.journal.forgottenBy(), "the cleanup is pending")
	require.Empty(t, syncsSince(c.recorded(), forgotAt), "no sync before the cleanup")
	require.Empty(t, c.nodesOf(lost.String()))

	restore()
	before := len(c.recorded())
	s.kick <- struct{}{}
	log := c.await(t, "a sync once the root answers", func(log []fakeCall) bool { return len(syncsSince(log, before)) > 0 })
	sync := syncsSince(log, before)[0]
	require.NoError(t, sync.Err)
	require.Equal(t, []digest.Digest{kept}, sync.Sync, "only the blob that exists is re-registered")
	require.Equal(t, 1.0, testutil.ToFloat64(s.metrics.forgottenGone), "and the deleted one is reported")
	require.False(t, s.journal.has(lost))
	require.Empty(t, s.journal.forgottenBy(), "the cleanup is done")
	require.Equal(t, []string{"node-3"}, c.nodesOf(kept.String()))
	require.Empty(t, c.nodesOf(lost.String()))
}

// TestForgottenCleanupSurvivesRestart: a node that restarts before the
// cleanup ran is no new member any more (its first session after the
// forget created its record), so only its journal remembers the cleanup:
// the new instance does it before its first sync.
func TestForgottenCleanupSurvivesRestart(t *testing.T) {
	ctx := context.Background()
	c := newFakeCluster(longTTL)
	root, state := t.TempDir(), t.TempDir()
	s := fakeStore(t, c, root, "node-3", WithStateDir(state))
	kept, lost := pull(ctx, t, s, "kept"), pull(ctx, t, s, "lost")
	awaitJoined(t, s, c)
	c.forget("node-3")
	require.NoError(t, os.Remove(s.blobPath(lost)))
	hangRoot(s)
	require.True(t, kick(t, s, c).Answer.NewMember)
	kick(t, s, c)
	require.Equal(t, c.id, s.journal.forgottenBy())
	require.NoError(t, s.Close())

	before := len(c.recorded())
	s = fakeStore(t, c, root, "node-3", WithStateDir(state))
	log := c.await(t, "the new instance's sync", func(log []fakeCall) bool { return len(syncsSince(log, before)) > 0 })
	require.False(t, calls(log[before:], "Session")[0].Answer.NewMember, "the member record exists again")
	require.Equal(t, []digest.Digest{kept}, syncsSince(log, before)[0].Sync)
	require.False(t, s.journal.has(lost))
	require.Empty(t, s.journal.forgottenBy())
	require.Equal(t, 1.0, testutil.ToFloat64(s.metrics.forgottenGone), "the new instance reports the deleted blob")
}
