package remote_test

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/containerd/containerd/v2/core/content"
	"github.com/containerd/errdefs"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/sharedcontent/sharedcontent/contentv2"
	"github.com/sharedcontent/sharedcontent/lockserver"
	"github.com/sharedcontent/sharedcontent/lockserver/api"
	"github.com/sharedcontent/sharedcontent/lockserver/lockservertest"
)

// refusing is the real coordinator as a node sees it, refusing the node's
// locks and sessions at once, as a refused connection would, while down
// is set: the node's store then marks the coordinator down, and no
// session answer lifts the mark. afterAddRef, if set, runs once an
// AddRef has been answered.
type refusing struct {
	contentv2.Coordinator
	down        atomic.Bool
	afterAddRef func()
}

func (c *refusing) Lock(ctx context.Context, req api.LockRequest) (contentv2.Lock, error) {
	if c.down.Load() {
		return nil, fmt.Errorf("lock: dial tcp: connection refused: %w", api.ErrUnavailable)
	}
	return c.Coordinator.Lock(ctx, req)
}

func (c *refusing) Session(ctx context.Context, req contentv2.SessionRequest) (contentv2.SessionInfo, error) {
	if c.down.Load() {
		return contentv2.SessionInfo{}, fmt.Errorf("session: dial tcp: connection refused: %w", api.ErrUnavailable)
	}
	return c.Coordinator.Session(ctx, req)
}

func (c *refusing) AddRef(ctx context.Context, dgst digest.Digest, found bool) error {
	err := c.Coordinator.AddRef(ctx, dgst, found)
	if err == nil && c.afterAddRef != nil {
		c.afterAddRef()
	}
	return err
}

// TestHolderGivesLeaseBackWhileMarkedDown (docs/design.md §10.6): a
// holder's pull lease goes back to the coordinator when its writer
// commits or closes while its node has the coordinator marked down
// (another of the node's calls failed: a parallel fetch's lock, here
// refused). The unlock used to go through the mark, which answered it
// without a request, so the lease's keepalive held it for as long as the
// node ran and every waiter of the blob waited with it. The lease TTL is
// an hour: only an unlock lets the other node's follower go on, with the
// holder's blob (committed) or the lock handed over (closed).
func TestHolderGivesLeaseBackWhileMarkedDown(t *testing.T) {
	for _, end := range []string{"committed", "closed"} {
		t.Run(end, func(t *testing.T) {
			ctx := context.Background()
			cfg := lockserver.DefaultConfig()
			cfg.SessionTTL = sessionTTL
			cfg.LeaseTTL = time.Hour
			ts := lockservertest.Start(t, lockservertest.WithConfig(cfg))
			root := filepath.Join(t.TempDir(), "root")
			hc := &refusing{Coordinator: node(t, ts, "holder")}
			holder := markedNode(t, root, "holder", hc)
			waiter := markedNode(t, root, "waiter", node(t, ts, "waiter"))

			data, desc := layer("lease back;")
			_, other := layer("a parallel fetch;")
			// markDown fails one of the holder's calls at once, as a
			// parallel fetch's lock meets a refused connection.
			markDown := func() {
				hc.down.Store(true)
				_, err := holder.Writer(ctx, content.WithRef("layer-"+other.Digest.String()), content.WithDescriptor(other))
				require.True(t, errdefs.IsUnavailable(err), "the other fetch's Writer: %v", err)
			}

			hw, ww := holdAndFollow(t, holder, waiter, data, desc)
			if end == "committed" {
				// Marked down between the commit's reference and its
				// unlock.
				var once atomic.Bool
				hc.afterAddRef = func() {
					if once.CompareAndSwap(false, true) {
						markDown()
					}
				}
				require.NoError(t, hw.Commit(ctx, desc.Size, desc.Digest))
				require.True(t, once.Load(), "the holder was marked down during its commit")
			} else {
				markDown()
				require.NoError(t, hw.Close())
			}

			st := followed(t, ww, "the waiter still waits: the holder's lease was never given back")
			if end == "committed" {
				require.Equal(t, desc.Size, st.Offset, "the holder's blob, not a download")
			} else {
				require.Zero(t, st.Offset, "the lock handed over: the waiter downloads")
			}
		})
	}
}

// markedNode opens node id's store on root, coordinated by coord, whose
// down mark lasts an hour (only a probe lifts a slow one), and returns it
// once synced.
func markedNode(t *testing.T, root, id string, coord contentv2.Coordinator) contentv2.Store {
	t.Helper()
	reg := prometheus.NewRegistry()
	s, err := contentv2.NewStore(root, id, coord, contentv2.WithStateDir(t.TempDir()), contentv2.WithSessionTTL(sessionTTL),
		contentv2.WithRefRetryInterval(time.Hour), contentv2.WithRegisterer(reg))
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	n := &skipRefNode{id: id, reg: reg}
	eventually(t, id+" synced", func() bool { return n.metric(t, "sharedcontent_store_synced") == 1 })
	return s
}

// layer is a layer blob of s repeated, and its descriptor.
func layer(s string) ([]byte, ocispec.Descriptor) {
	data := bytes.Repeat([]byte(s), 100)
	return data, ocispec.Descriptor{MediaType: ocispec.MediaTypeImageLayerGzip, Digest: digest.FromBytes(data), Size: int64(len(data))}
}

// followed returns the status a follower's wait ends with, failing with
// stuck if it still waits after a minute (the leases in these tests last
// an hour).
func followed(t *testing.T, ww content.Writer, stuck string) content.Status {
	t.Helper()
	done := make(chan error, 1)
	var st content.Status
	go func() {
		var err error
		st, err = ww.Status()
		done <- err
	}()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(time.Minute):
		t.Fatal(stuck)
	}
	return st
}

// holdAndFollow opens desc's writer on holder, which takes the pull lock,
// then on waiter, which follows it, and writes data into the holder's.
// The waiter's is closed at the test's end.
func holdAndFollow(t *testing.T, holder, waiter contentv2.Store, data []byte, desc ocispec.Descriptor) (hw, ww content.Writer) {
	t.Helper()
	ctx := context.Background()
	ref := "layer-" + desc.Digest.String()
	hw, err := holder.Writer(ctx, content.WithRef(ref), content.WithDescriptor(desc))
	require.NoError(t, err)
	_, follows := hw.(contentv2.Follower)
	require.False(t, follows, "the holder has the pull lock")
	ww, err = waiter.Writer(ctx, content.WithRef(ref), content.WithDescriptor(desc))
	require.NoError(t, err)
	t.Cleanup(func() { ww.Close() })
	_, follows = ww.(contentv2.Follower)
	require.True(t, follows, "the waiter follows the holder")
	_, err = hw.Write(data)
	require.NoError(t, err)
	return hw, ww
}
