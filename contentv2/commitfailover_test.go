package contentv2

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/containerd/containerd/v2/core/content"
	"github.com/containerd/errdefs"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"github.com/sharedcontent/sharedcontent/lockserver/api"
	"github.com/stretchr/testify/require"
)

// gatedUnlocks is a node's coordinator whose lock releases wait until
// the gate opens, as an unlock sent during a failover waits (retried) for
// the next leader.
type gatedUnlocks struct {
	Coordinator
	gate chan struct{}
	once sync.Once
	// lost: the locks it hands out report no lease surely held.
	lost bool
}

func (c *gatedUnlocks) open() { c.once.Do(func() { close(c.gate) }) }

func (c *gatedUnlocks) Lock(ctx context.Context, req api.LockRequest) (Lock, error) {
	lk, err := c.Coordinator.Lock(ctx, req)
	if err != nil {
		return nil, err
	}
	return gatedLock{Lock: lk, c: c}, nil
}

type gatedLock struct {
	Lock
	c *gatedUnlocks
}

func (l gatedLock) Unlock(ctx context.Context, success bool, cause error) error {
	<-l.c.gate
	return l.Lock.Unlock(ctx, success, cause)
}

func (l gatedLock) HeldUntil() time.Time {
	if l.c.lost {
		return time.Time{}
	}
	return l.Lock.HeldUntil()
}

// commitEnv is two synced members on one root; node-1's reference adds
// are not answered (a failover in progress) and its unlocks wait at a
// gate.
type commitEnv struct {
	c            *fakeCluster
	root         string
	coord1       *gatedUnlocks
	node1, node2 *store
}

func newCommitEnv(t *testing.T, lost bool) *commitEnv {
	e := &commitEnv{c: newFakeCluster(longTTL), root: t.TempDir()}
	e.coord1 = &gatedUnlocks{Coordinator: e.c.node("node-1"), gate: make(chan struct{}), lost: lost}
	cs, err := NewStore(e.root, "node-1", e.coord1, WithStateDir(t.TempDir()), WithSessionTTL(e.c.ttl))
	require.NoError(t, err)
	t.Cleanup(func() { cs.Close() })
	t.Cleanup(e.coord1.open) // runs first: Close waits for the release
	e.node1 = cs.(*store)
	e.node2 = fakeStore(t, e.c, e.root, "node-2")
	awaitJoined(t, e.node1, e.c)
	awaitJoined(t, e.node2, e.c)
	e.c.setRefuse(func(call fakeCall) error {
		if call.Method == "AddRef" && call.Node == "node-1" {
			return errFakeDown
		}
		return nil
	})
	return e
}

// written opens node-1's writer of a blob made of s (its pull lock
// granted) and writes the blob whole.
func (e *commitEnv) written(t *testing.T, s string) (content.Writer, []byte, ocispec.Descriptor) {
	t.Helper()
	data, desc := testBlob(s)
	w, err := e.node1.Writer(context.Background(), writerOf(desc)...)
	require.NoError(t, err)
	_, err = w.Write(data)
	require.NoError(t, err)
	return w, data, desc
}

// TestCommitDuringFailoverCompletes (docs/design.md §8.17): node-1's
// reference add before the rename meets a failover. The commit completes
// under the pull lease; until the lease's release arrives another node's
// delete is refused (the lease is held), and the release records the
// reference, after which the delete is refused as in use. The blob reads
// back throughout.
func TestCommitDuringFailoverCompletes(t *testing.T) {
	e := newCommitEnv(t, false)
	ctx := context.Background()
	w, data, desc := e.written(t, "committed in a failover ")
	require.NoError(t, w.Commit(ctx, desc.Size, desc.Digest), "the pull must not fail")
	require.NoError(t, w.Close())
	require.Len(t, calls(e.c.recorded(), "AddRef"), 1, "the reference add was tried and failed")
	require.Empty(t, e.c.nodesOf(desc.Digest.String()), "not recorded yet")

	// The window: nothing recorded, the lease held.
	require.NoError(t, e.node2.Delete(ctx, desc.Digest))
	got, err := content.ReadBlob(ctx, e.node1, desc)
	require.NoError(t, err, "another node's delete removed the blob in the window")
	require.Equal(t, data, got)

	e.coord1.open()
	e.c.await(t, "the pull's release", func(log []fakeCall) bool {
		for _, c := range calls(log, "Unlock") {
			if c.Node == "node-1" && c.Type == api.OperationPull && c.Success && c.Err == nil {
				return true
			}
		}
		return false
	})
	require.Equal(t, []string{"node-1"}, e.c.nodesOf(desc.Digest.String()), "the release recorded the reference")
	require.NoError(t, e.node2.Delete(ctx, desc.Digest))
	got, err = content.ReadBlob(ctx, e.node1, desc)
	require.NoError(t, err, "a blob node-1 references was deleted")
	require.Equal(t, data, got)
}

// TestCommitWithoutHeldLeaseFails: the same failed reference add, but the
// pull lease is not surely held (lost, or too near its end): no lease
// protects the blob, so Commit fails as before (containerd's pull fails,
// a retry downloads again) and leaves nothing in blobs/.
func TestCommitWithoutHeldLeaseFails(t *testing.T) {
	e := newCommitEnv(t, true)
	ctx := context.Background()
	w, _, desc := e.written(t, "lease not held ")
	err := w.Commit(ctx, desc.Size, desc.Digest)
	require.ErrorIs(t, err, errdefs.ErrUnavailable)
	_, err = e.node1.local.Info(ctx, desc.Digest)
	require.ErrorIs(t, err, errdefs.ErrNotFound, "nothing committed without the reference or the lease")
	e.coord1.open()
	require.NoError(t, w.Close())
}
