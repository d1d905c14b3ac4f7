package contentv2

import (
	"context"
	"testing"
	"time"

	"github.com/containerd/errdefs"
	"github.com/opencontainers/go-digest"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
)

// TestGuardBoundsStuckCalls: calls that do not return within the timeout
// fail with ErrRootStalled and stall the guard; once max of them are
// stuck, a new call fails at once without running; the guard resumes by
// itself when they return, and a call abandoned by its caller runs its
// undo hook when it finally returns.
func TestGuardBoundsStuckCalls(t *testing.T) {
	const timeout = 50 * time.Millisecond
	g, err := newGuard("/shared", timeout, nil)
	require.NoError(t, err)
	g.max = 2
	hung := make(chan struct{})
	undone := make(chan struct{}, g.max)
	for range g.max {
		start := time.Now()
		err := g.doUndo(context.Background(), "info", func() error { <-hung; return nil }, func() { undone <- struct{}{} })
		require.ErrorIs(t, err, ErrRootStalled)
		require.True(t, errdefs.IsUnavailable(err))
		require.GreaterOrEqual(t, time.Since(start), timeout)
	}
	require.ErrorIs(t, g.refuse("delete"), ErrRootStalled)
	stalls, _ := g.stallsSince()
	require.Equal(t, uint64(1), stalls, "one stall, however many calls it caught")

	// Refused without running, so without a deadline of its own: no
	// timeout counted for it (a call that ran and hung would count one,
	// as each stuck call did).
	ran := false
	err = g.do(context.Background(), "info", func() error { ran = true; return nil })
	require.ErrorIs(t, err, ErrRootStalled)
	require.False(t, ran, "refused at once once max calls are stuck")
	require.Equal(t, float64(g.max), testutil.ToFloat64(g.timeouts.WithLabelValues("info")), "no deadline ran for the refused call")
	require.Contains(t, err.Error(), "2 calls stuck")

	close(hung)
	for range g.max {
		<-undone
	}
	require.NoError(t, g.refuse(""), "every stuck call returned: no longer stalled")
	require.NoError(t, g.do(context.Background(), "info", func() error { return nil }))
}

// stall stalls g as a call on a hung root does, without waiting g's
// timeout: a call that returns only when hung is closed is put past its
// deadline at once (what its timer does after the timeout). The guard's
// timeout can then be long, so that the test's healthy calls never go
// overdue on a loaded machine. returned is closed once the call has
// returned.
func stall(t *testing.T, g *guard, hung <-chan struct{}) (returned <-chan struct{}, err error) {
	t.Helper()
	done := make(chan struct{})
	c, err := g.start("info", func() { <-hung }, func() { close(done) })
	require.NoError(t, err)
	g.mu.Lock()
	c.deadline = time.Now()
	g.mu.Unlock()
	c.expire()
	return done, c.wait(context.Background())
}

// TestReaperForgetsAcrossAStall: the reaper's observations survive from
// pass to pass, but not across a stall of the root: a pass while stalled
// is refused, and the first pass after it observes afresh (a reference
// to a missing blob counts as missing only from then).
func TestReaperForgetsAcrossAStall(t *testing.T) {
	c := newFakeCluster(longTTL)
	// The default storage timeout: the healthy passes are never late;
	// the stall is made by hand.
	s := fakeStore(t, c, t.TempDir(), "node-1", WithReaper(0, reapGrace))
	ctx := context.Background()
	missing := digest.FromString("gone").String()
	c.addRef(missing, "node-2")
	seen := func() time.Time {
		s.reaper.mem.mu.Lock()
		defer s.reaper.mem.mu.Unlock()
		return s.reaper.mem.dangling[missing]
	}
	_, err := s.Reap(ctx)
	require.NoError(t, err)
	first := seen()
	require.False(t, first.IsZero(), "the reference is seen missing")
	_, err = s.Reap(ctx)
	require.NoError(t, err)
	require.Equal(t, first, seen(), "kept from pass to pass")

	hung := make(chan struct{})
	returned, err := stall(t, s.guard, hung)
	require.ErrorIs(t, err, ErrRootStalled)
	_, err = s.Reap(ctx)
	require.ErrorIs(t, err, ErrRootStalled, "no pass while stalled")
	close(hung)
	<-returned
	require.NoError(t, s.RootStalled())

	rep, err := s.Reap(ctx)
	require.NoError(t, err)
	require.True(t, rep.Ran)
	require.True(t, seen().After(first), "observed afresh after the stall")
}
