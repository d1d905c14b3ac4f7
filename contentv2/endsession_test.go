package contentv2_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/containerd/errdefs"
	"github.com/stretchr/testify/require"

	"github.com/sharedcontent/sharedcontent/contentv2"
	"github.com/sharedcontent/sharedcontent/contentv2/remote"
	"github.com/sharedcontent/sharedcontent/lockclient"
	"github.com/sharedcontent/sharedcontent/lockserver"
	"github.com/sharedcontent/sharedcontent/lockserver/api"
	"github.com/sharedcontent/sharedcontent/lockserver/lockservertest"
)

// sessionRecorder is a node's coordinator that records its session calls
// and, once cut, reaches nothing (a crashed daemon sends nothing more).
type sessionRecorder struct {
	contentv2.Coordinator

	// gate: calls hold it for reading while they run, cut for writing, so
	// no call started before the cut succeeds after it.
	gate sync.RWMutex
	cut  bool // protected by gate

	mu sync.Mutex
	// lastSent is when the last session call that was answered was
	// sent; firstAnswered when the first answered one returned.
	lastSent, firstAnswered time.Time // protected by mu
	duplicates              int       // protected by mu; refusals as a duplicate
	ends                    int       // protected by mu; EndSession calls
}

var errCut = fmt.Errorf("node cut off: %w", errdefs.ErrUnavailable)

func (c *sessionRecorder) Session(ctx context.Context, req contentv2.SessionRequest) (contentv2.SessionInfo, error) {
	c.gate.RLock()
	defer c.gate.RUnlock()
	if c.cut {
		return contentv2.SessionInfo{}, errCut
	}
	sent := time.Now()
	info, err := c.Coordinator.Session(ctx, req)
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case errors.Is(err, api.ErrDuplicateNode):
		c.duplicates++
	case err == nil:
		c.lastSent = sent
		if c.firstAnswered.IsZero() {
			c.firstAnswered = time.Now()
		}
	}
	return info, err
}

func (c *sessionRecorder) EndSession(ctx context.Context, instanceID string) (bool, error) {
	c.gate.RLock()
	defer c.gate.RUnlock()
	c.mu.Lock()
	c.ends++
	c.mu.Unlock()
	if c.cut {
		return false, errCut
	}
	return c.Coordinator.EndSession(ctx, instanceID)
}

// Cut stops the node's traffic, as a crash does.
func (c *sessionRecorder) Cut() {
	c.gate.Lock()
	c.cut = true
	c.gate.Unlock()
}

func (c *sessionRecorder) record() (lastSent, firstAnswered time.Time, duplicates, ends int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lastSent, c.firstAnswered, c.duplicates, c.ends
}

// restartEnv is a real coordinator with session TTL ttl, and a maker of
// node-1's stores on one root, each with its own client (one daemon
// instance each).
func restartEnv(t *testing.T, ttl time.Duration) func(stateDir string) (contentv2.Store, *sessionRecorder, error) {
	cfg := lockserver.DefaultConfig()
	cfg.SessionTTL = ttl
	coord := lockservertest.Start(t, lockservertest.WithConfig(cfg))
	root := t.TempDir()
	return func(stateDir string) (contentv2.Store, *sessionRecorder, error) {
		c, err := lockclient.New(coord.URL(), lockclient.WithNodeID("node-1"))
		require.NoError(t, err)
		t.Cleanup(func() { c.Close() })
		rec := &sessionRecorder{Coordinator: remote.New(c)}
		cs, err := contentv2.NewStore(root, "node-1", rec, contentv2.WithStateDir(stateDir), contentv2.WithSessionTTL(ttl))
		if err == nil {
			t.Cleanup(func() { cs.Close() })
		}
		return cs, rec, err
	}
}

// TestCleanRestartStartsAtOnce: a store closed cleanly ends its session,
// so the next instance of the node starts at once: its first session is
// not refused as a duplicate although the old session would still have
// been live (sent before the old one's last answered renewal plus the
// TTL), and the restart takes less than the TTL.
//
// Before: the old session stayed live until it lapsed; the new instance
// was refused (duplicate_node) and waited about the TTL.
func TestCleanRestartStartsAtOnce(t *testing.T) {
	const ttl = 6 * time.Second
	newStore := restartEnv(t, ttl)
	stateDir := t.TempDir()
	old, oldRec, err := newStore(stateDir)
	require.NoError(t, err)
	require.NoError(t, old.Close())
	require.NoError(t, old.Close())
	closed := time.Now()
	oldLast, _, _, ends := oldRec.record()
	require.Equal(t, 1, ends, "Close ends the session once")

	_, rec, err := newStore(stateDir)
	started := time.Now()
	require.NoError(t, err)
	_, first, duplicates, _ := rec.record()
	require.Zero(t, duplicates, "the new instance is not refused as a duplicate")
	require.True(t, first.Before(oldLast.Add(ttl)),
		"the new session was opened (%v after the old instance's last renewal) while the old one would still have been live (TTL %v)",
		first.Sub(oldLast), ttl)
	t.Logf("restarted in %v (TTL %v); first session %v after the old instance's last renewal", started.Sub(closed), ttl, first.Sub(oldLast))
}

// TestCrashedInstanceHoldsSessionUntilLapse: a store that did not close
// (it crashed: its traffic stops) leaves its session live, and a new
// instance of the node is refused as a duplicate until that session
// lapses: it starts only once the old session's TTL has run from its
// last answered renewal, or refuses to start.
func TestCrashedInstanceHoldsSessionUntilLapse(t *testing.T) {
	const ttl = 2 * time.Second
	newStore := restartEnv(t, ttl)
	_, crashed, err := newStore(t.TempDir())
	require.NoError(t, err)
	crashed.Cut()
	oldLast, _, _, _ := crashed.record()

	cut := time.Now()
	_, rec, err := newStore(t.TempDir())
	t.Logf("new instance start: %v after the crash (TTL %v), err %v", time.Since(cut), ttl, err)
	_, first, duplicates, _ := rec.record()
	require.NotZero(t, duplicates, "the new instance is refused as a duplicate while the crashed one's session is live")
	if err != nil {
		require.ErrorIs(t, err, api.ErrDuplicateNode, "refused to start: the old session outlived the wait")
		return
	}
	require.False(t, first.Before(oldLast.Add(ttl)),
		"the new session was granted %v after the crashed instance's last renewal, within its TTL %v", first.Sub(oldLast), ttl)
}
