package contentv2

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
)

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
