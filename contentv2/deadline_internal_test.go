package contentv2

import (
	"context"
	"testing"
	"time"

	"github.com/containerd/errdefs"
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

	ran := false
	start := time.Now()
	err = g.do(context.Background(), "info", func() error { ran = true; return nil })
	require.ErrorIs(t, err, ErrRootStalled)
	require.Less(t, time.Since(start), timeout, "refused at once once max calls are stuck")
	require.False(t, ran)
	require.Contains(t, err.Error(), "2 calls stuck")

	close(hung)
	for range g.max {
		<-undone
	}
	require.NoError(t, g.refuse(""), "every stuck call returned: no longer stalled")
	require.NoError(t, g.do(context.Background(), "info", func() error { return nil }))
}
