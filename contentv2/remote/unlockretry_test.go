package remote_test

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/containerd/containerd/v2/core/content"
	"github.com/containerd/errdefs"
	"github.com/opencontainers/go-digest"
	"github.com/stretchr/testify/require"

	"github.com/sharedcontent/sharedcontent/contentv2"
	"github.com/sharedcontent/sharedcontent/lockserver"
	"github.com/sharedcontent/sharedcontent/lockserver/api"
	"github.com/sharedcontent/sharedcontent/lockserver/lockservertest"
)

// stalling is the real coordinator as a node sees it, whose pull lock of
// slow waits out its caller's deadline (a lock request queued behind a
// storm: the node marks the coordinator slow), and whose pull lock of
// held is answered only once release is closed (a probe in flight: while
// it is, every other call meets the mark). It records the node's
// instance.
type stalling struct {
	contentv2.Coordinator
	slow, held digest.Digest
	entered    chan struct{} // closed when held's lock arrives
	enter      sync.Once
	release    chan struct{}
	instance   atomic.Pointer[string]
}

func (c *stalling) Lock(ctx context.Context, req api.LockRequest) (contentv2.Lock, error) {
	switch req.ResourceID {
	case c.slow.String():
		<-ctx.Done()
		return nil, fmt.Errorf("lock: %w", ctx.Err())
	case c.held.String():
		c.enter.Do(func() { close(c.entered) })
		<-c.release
		return nil, fmt.Errorf("lock: the test let the probe go: %w", api.ErrUnavailable)
	}
	return c.Coordinator.Lock(ctx, req)
}

func (c *stalling) Session(ctx context.Context, req contentv2.SessionRequest) (contentv2.SessionInfo, error) {
	c.instance.Store(&req.InstanceID)
	return c.Coordinator.Session(ctx, req)
}

// TestUnlockRetryAfterNoSessionWhileMarkedDown (docs/design.md §10.6): a
// holder's unlock refused for want of a session (the coordinator ended
// it; the node's next round is minutes away) is retried once the session
// is open again, and that retry reaches the coordinator although the node
// has it marked down (slow, a probe in flight). It used to go through the
// mark, which answered it without a request: the first unlock had ended
// the lease's keepalive, so the lock stayed held until the lease expired
// (an hour here, a lease TTL in general) and every waiter of the blob
// waited with it.
func TestUnlockRetryAfterNoSessionWhileMarkedDown(t *testing.T) {
	ctx := context.Background()
	cfg := lockserver.DefaultConfig()
	cfg.SessionTTL = sessionTTL
	cfg.LeaseTTL = time.Hour
	ts := lockservertest.Start(t, lockservertest.WithConfig(cfg))
	root := filepath.Join(t.TempDir(), "root")
	data, desc := layer("unlock retry;")
	_, slow := layer("a fetch the slow coordinator times out;")
	_, held := layer("a probe in flight;")
	hc := &stalling{Coordinator: node(t, ts, "holder"), slow: slow.Digest, held: held.Digest,
		entered: make(chan struct{}), release: make(chan struct{})}
	holder := markedNode(t, root, "holder", hc)
	waiter := markedNode(t, root, "waiter", node(t, ts, "waiter"))

	hw, ww := holdAndFollow(t, holder, waiter, data, desc)

	// The holder marks the coordinator slow: a parallel fetch's lock
	// outlives the coordination timeout.
	_, err := holder.Writer(ctx, content.WithRef("layer-"+slow.Digest.String()), content.WithDescriptor(slow))
	require.True(t, errdefs.IsUnavailable(err), "the slow fetch's Writer: %v", err)
	// A later fetch goes through as the probe, and stays in flight.
	probed := make(chan struct{})
	go func() {
		defer close(probed)
		for {
			select {
			case <-hc.entered:
				return
			default:
			}
			_, err := holder.Writer(ctx, content.WithRef("layer-"+held.Digest.String()), content.WithDescriptor(held))
			if err == nil || !errdefs.IsUnavailable(err) {
				t.Errorf("the probe's Writer: %v", err)
				return
			}
			time.Sleep(10 * time.Millisecond) // the probe's time comes a coordination timeout after the slow answer
		}
	}()
	defer func() { close(hc.release); <-probed }()
	select {
	case <-hc.entered:
	case <-time.After(time.Minute):
		t.Fatal("no probe went through")
	}

	// The coordinator ends the holder's session, as a restart or lapse
	// does: the unlock's success is refused (no_session) until the holder
	// opens it again.
	inst := hc.instance.Load()
	require.NotNil(t, inst)
	ended, err := ts.Core().EndSession(ctx, api.EndSessionRequest{NodeID: "holder", InstanceID: *inst})
	require.NoError(t, err)
	require.True(t, ended.Ended, ended.Reason)

	require.NoError(t, hw.Commit(ctx, desc.Size, desc.Digest), "the lease carries the reference the mark kept back")

	st := followed(t, ww, "the waiter still waits: the holder's unlock, refused for want of a session, was never retried")
	require.Equal(t, desc.Size, st.Offset, "the holder's blob, not a download")
	rc, err := ts.Core().Refs(ctx, desc.Digest.String())
	require.NoError(t, err)
	require.Contains(t, rc.Nodes, "holder", "the unlock's success recorded the holder's reference")
}
