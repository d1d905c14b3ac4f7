package contentv2_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/containerd/containerd/v2/core/content"
	"github.com/containerd/containerd/v2/plugins/content/local"
	"github.com/containerd/errdefs"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"github.com/stretchr/testify/require"

	"github.com/sharedcontent/sharedcontent/contentv2"
	"github.com/sharedcontent/sharedcontent/contentv2/remote"
	"github.com/sharedcontent/sharedcontent/lockclient"
	"github.com/sharedcontent/sharedcontent/lockserver"
	"github.com/sharedcontent/sharedcontent/lockserver/api"
	"github.com/sharedcontent/sharedcontent/lockserver/lockservertest"
)

// staleView is a node's view of the shared directory through a
// filesystem's attribute cache: Info of a blob it has looked up once keeps
// answering for a while after another node deleted the file. GlusterFS
// with its default caches does this for about a second (docs/e2e.md).
type staleView struct {
	content.Store
	mu   sync.Mutex
	seen map[digest.Digest]content.Info
}

func (v *staleView) Info(ctx context.Context, dgst digest.Digest) (content.Info, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if info, ok := v.seen[dgst]; ok {
		return info, nil
	}
	info, err := v.Store.Info(ctx, dgst)
	if err == nil {
		v.seen[dgst] = info
	}
	return info, err
}

// TestStaleViewOfADeletedBlob: node 2 looked a blob up, then node 1
// deleted it; node 2's filesystem still shows it. Node 2's use of the blob
// must fail with NotFound (so containerd fetches it again) and record no
// reference, rather than hand containerd a blob that is gone. Once a node
// has committed the blob again, node 2 uses it.
func TestStaleViewOfADeletedBlob(t *testing.T) {
	e := newStaleViewEnv(t, lockservertest.Start(t))
	require.NoError(t, e.write(e.n1))
	e.look()
	require.NoError(t, e.n1.Delete(e.ctx, e.desc.Digest))
	require.NoFileExists(t, blobFile(e.root, e.desc.Digest), "node 1's delete removed the blob")
	e.requireRefused()
	e.requirePulledAgain()
}

// staleViewEnv is two nodes on one root and one coordinator; node 2 sees
// the root through a staleView.
type staleViewEnv struct {
	t      *testing.T
	ctx    context.Context
	coord  *lockservertest.Server
	root   string
	view   *staleView
	n1, n2 contentv2.Store
	data   []byte
	desc   ocispec.Descriptor
}

func newStaleViewEnv(t *testing.T, coord *lockservertest.Server) *staleViewEnv {
	root := t.TempDir()
	node := func(id string, opts ...contentv2.Option) contentv2.Store {
		c, err := lockclient.New(coord.URL(), lockclient.WithNodeID(id))
		require.NoError(t, err)
		t.Cleanup(func() { c.Close() })
		cs, err := contentv2.NewStore(root, id, remote.New(c), append(opts, contentv2.WithStateDir(t.TempDir()))...)
		require.NoError(t, err)
		t.Cleanup(func() { cs.Close() })
		return cs
	}
	e := &staleViewEnv{t: t, ctx: context.Background(), coord: coord, root: root}
	e.n1 = node("node-1")
	local2, err := local.NewStore(root)
	require.NoError(t, err)
	e.view = &staleView{Store: local2, seen: map[digest.Digest]content.Info{}}
	e.n2 = node("node-2", contentv2.WithLocalStore(e.view))
	e.data, e.desc = blob("stale view ")
	return e
}

func (e *staleViewEnv) write(cs content.Store) error {
	return content.WriteBlob(e.ctx, cs, "layer-"+e.desc.Digest.String(), bytes.NewReader(e.data), e.desc)
}

// look is node 2's filesystem looking the blob up (and caching it).
func (e *staleViewEnv) look() {
	_, err := e.view.Info(e.ctx, e.desc.Digest)
	require.NoError(e.t, err)
}

// requireRefused: node 2's use of the deleted blob fails with NotFound
// and is recorded nowhere.
func (e *staleViewEnv) requireRefused() {
	t := e.t
	_, err := e.n2.Info(e.ctx, e.desc.Digest)
	require.ErrorIs(t, err, errdefs.ErrNotFound, "a stale view of a deleted blob is not a blob")
	refs, err := e.coord.Core().Refs(e.ctx, e.desc.Digest.String())
	require.NoError(t, err)
	require.Zero(t, refs.Count, "node 2's refused use is recorded nowhere")
}

// requirePulledAgain: once node 1 has pulled the blob again, node 2 uses
// it.
func (e *staleViewEnv) requirePulledAgain() {
	t := e.t
	require.NoError(t, e.write(e.n1), "node 1 pulls the blob again")
	info, err := e.n2.Info(e.ctx, e.desc.Digest)
	require.NoError(t, err, "after the blob's new pull node 2 uses it")
	require.Equal(t, e.desc.Size, info.Size)
	refs, err := e.coord.Core().Refs(e.ctx, e.desc.Digest.String())
	require.NoError(t, err)
	require.ElementsMatch(t, []string{"node-1", "node-2"}, refs.Nodes)
}

// TestStaleViewAfterCoordinatorRestart (docs/design.md §8.9): the
// coordinator restarts after node 1's delete completed; node 2, whose
// filesystem still shows the blob, must still be refused.
func TestStaleViewAfterCoordinatorRestart(t *testing.T) {
	e := newStaleViewEnv(t, lockservertest.Start(t))
	require.NoError(t, e.write(e.n1))
	e.look()
	require.NoError(t, e.n1.Delete(e.ctx, e.desc.Digest))
	require.NoFileExists(t, blobFile(e.root, e.desc.Digest))
	e.coord.Restart()
	e.requireRefused()
	e.requirePulledAgain()
}

// TestStaleViewAfterDeleterKilled (docs/design.md §8.9): node 1's
// deleter renamed the blob into the trash and was killed before its
// unlock. Its lease lapses (or the coordinator restarts while it is
// granted); the coordinator cannot know whether the rename happened, so
// node 2's stale view must be refused.
func TestStaleViewAfterDeleterKilled(t *testing.T) {
	for _, tc := range []struct {
		name string
		end  func(*staleViewEnv)
	}{
		{"lease lapses", waitDeleteReleased},
		{"coordinator restarts", func(e *staleViewEnv) { e.coord.Restart() }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := lockserver.DefaultConfig()
			cfg.LeaseTTL = 300 * time.Millisecond
			e := newStaleViewEnv(t, lockservertest.Start(t, lockservertest.WithConfig(cfg)))
			require.NoError(t, e.write(e.n1))
			e.look()
			killedDeleter(e)
			tc.end(e)
			e.requireRefused()
			e.requirePulledAgain()
		})
	}
}

// killedDeleter does what node 1's Delete does up to its rename, as a
// process killed right after it: the delete lock is granted (no
// keepalive follows), the blob renamed into the trash, no unlock.
func killedDeleter(e *staleViewEnv) {
	t := e.t
	req := api.LockRequest{Type: api.OperationDelete, ResourceID: e.desc.Digest.String(), NodeID: "node-1", RequestID: "killed"}
	body, err := json.Marshal(req)
	require.NoError(t, err)
	// Granted once every member has synced (their sessions start with
	// their stores).
	require.Eventually(t, func() bool {
		resp, err := http.Post(e.coord.URL()+"/lock", "application/json", bytes.NewReader(body))
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		var lr api.LockResponse
		return resp.StatusCode == http.StatusOK && json.NewDecoder(resp.Body).Decode(&lr) == nil && lr.Acquired
	}, 30*time.Second, 10*time.Millisecond)
	trash := filepath.Join(e.root, contentv2.TrashDir)
	require.NoError(t, os.MkdirAll(trash, 0o755))
	require.NoError(t, os.Rename(blobFile(e.root, e.desc.Digest), filepath.Join(trash, "killed-deleter")))
}

// waitDeleteReleased waits until the coordinator has released the killed
// deleter's lease.
func waitDeleteReleased(e *staleViewEnv) {
	require.Eventually(e.t, func() bool {
		st, err := e.coord.Core().Status(e.ctx, api.OperationDelete, e.desc.Digest.String(), "", "")
		return err == nil && st.Holder == nil
	}, 30*time.Second, 10*time.Millisecond)
}

// TestLibraryModeBlobPutBackAfterDelete: node 1 deleted a blob, and it was
// put back without the coordinator (an uncoordinated write of a node cut
// off meanwhile) before that delete's completion expired. Node 2's use of
// it is refused as a possibly stale view; its write must then end with
// the blob present and node 2 referenced, not with ErrAlreadyExists and
// no reference.
func TestLibraryModeBlobPutBackAfterDelete(t *testing.T) {
	coord := lockservertest.Start(t)
	root := t.TempDir()
	node := func(id string) contentv2.Store {
		c, err := lockclient.New(coord.URL(), lockclient.WithNodeID(id))
		require.NoError(t, err)
		t.Cleanup(func() { c.Close() })
		cs, err := contentv2.NewStore(root, id, remote.New(c), contentv2.WithMode(contentv2.LibraryMode), contentv2.WithStateDir(t.TempDir()))
		require.NoError(t, err)
		t.Cleanup(func() { cs.Close() })
		return cs
	}
	n1, n2 := node("node-1"), node("node-2")
	ctx := context.Background()
	data, desc := blob("put back ")
	write := func(cs content.Store) error {
		return content.WriteBlob(ctx, cs, "layer-"+desc.Digest.String(), bytes.NewReader(data), desc)
	}
	require.NoError(t, write(n1))
	require.NoError(t, n1.Delete(ctx, desc.Digest))
	require.NoFileExists(t, blobFile(root, desc.Digest))
	require.NoError(t, os.WriteFile(blobFile(root, desc.Digest), data, 0o444), "put back uncoordinated")

	require.NoError(t, write(n2))
	refs, err := coord.Core().Refs(ctx, desc.Digest.String())
	require.NoError(t, err)
	require.Equal(t, []string{"node-2"}, refs.Nodes, "node 2 uses the blob, so it is referenced")
	got, err := content.ReadBlob(ctx, n2, desc)
	require.NoError(t, err)
	require.Equal(t, data, got)
}
