package contentv2

import (
	"bytes"
	"context"
	"errors"
	"os"
	"sync/atomic"
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
// cleanup ran does it before its first sync, from its journal. The
// coordinator also says NewMember until that sync, but only from memory:
// a coordinator restarted meanwhile would not, and the journal is what
// survives both restarts.
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
	require.True(t, calls(log[before:], "Session")[0].Answer.NewMember, "no sync completed since the forget")
	require.Equal(t, []digest.Digest{kept}, syncsSince(log, before)[0].Sync)
	require.False(t, s.journal.has(lost))
	require.Empty(t, s.journal.forgottenBy())
	require.Equal(t, 1.0, testutil.ToFloat64(s.metrics.forgottenGone), "the new instance reports the deleted blob")
}

// losingSession is a Coordinator whose session answers are lost while
// lose is set: the coordinator serves the call, the node gets a time-out.
type losingSession struct {
	Coordinator
	lose atomic.Bool
}

var errAnswerLost = errors.New("session answer lost (time-out)")

func (c *losingSession) Session(ctx context.Context, req SessionRequest) (SessionInfo, error) {
	info, err := c.Coordinator.Session(ctx, req)
	if err == nil && c.lose.Load() {
		return SessionInfo{}, errAnswerLost
	}
	return info, err
}

// TestForgottenNodeLearnsDespiteLostAnswer: a member forgotten by the
// coordinator learns it although the answer of the session that made it
// a member again is lost: every answer says NewMember until its sync
// completes. It handles the news once (a sync refused in between brings
// another such answer), and not again once synced.
func TestForgottenNodeLearnsDespiteLostAnswer(t *testing.T) {
	c := newFakeCluster(longTTL)
	coord := &losingSession{Coordinator: c.node("node-1")}
	cs, err := NewStore(t.TempDir(), "node-1", coord, WithStateDir(t.TempDir()), WithSessionTTL(c.ttl))
	require.NoError(t, err)
	t.Cleanup(func() { cs.Close() })
	s := cs.(*store)
	awaitJoined(t, s, c)

	c.mu.Lock()
	delete(c.members, "node-1") // forgotten (node forget, or expiry)
	c.mu.Unlock()
	coord.lose.Store(true)
	lost := kick(t, s, c)
	require.True(t, lost.Answer.NewMember, "the coordinator made it a member again")
	coord.lose.Store(false)
	c.setRefuse(func(call fakeCall) error {
		if call.Method == "SyncRefs" {
			c.refuse = nil // once
			return errors.New("sync refused once")
		}
		return nil
	})
	told := kick(t, s, c)
	require.True(t, told.Answer.NewMember, "the next answer says so again")
	again := kick(t, s, c)
	require.True(t, again.Answer.NewMember, "its sync was refused: still new")
	c.await(t, "its sync", func(log []fakeCall) bool {
		syncs := calls(log, "SyncRefs")
		return len(syncs) > 0 && syncs[len(syncs)-1].Err == nil && syncs[len(syncs)-1].At.After(again.At)
	})
	synced := kick(t, s, c)
	require.False(t, synced.Answer.NewMember, "synced: no longer new")
	kick(t, s, c)
	require.Equal(t, 1.0, testutil.ToFloat64(s.metrics.forgotten), "the node handled being forgotten once")
}
