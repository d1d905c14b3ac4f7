package integration

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/containerd/containerd/v2/core/content"
	"github.com/containerd/containerd/v2/core/content/proxy"
	"github.com/containerd/containerd/v2/core/metadata"
	"github.com/containerd/containerd/v2/core/remotes"
	"github.com/containerd/errdefs"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sharedcontent/sharedcontent/contentv2"
	"github.com/sharedcontent/sharedcontent/contentv2/remote"
	"github.com/sharedcontent/sharedcontent/lockclient"
	"github.com/sharedcontent/sharedcontent/plugin"

	"github.com/sharedcontent/sharedcontent/lockserver/api"
)

// The follower writer (docs/design.md §5.3): a node that finds a blob held by another
// node gets a writer at once and waits in Status; it then shares the
// holder's blob without downloading, or downloads it itself after a
// hand-off. Each scenario runs with containerd's metadata store calling
// the store directly (in-process, plugin/builtin) and through containerd's
// proxy client and the plugin's socket (the proxy plugin).

// followNode is a node whose containerd metadata sits on the store, either
// directly or through the plugin's socket.
type followNode struct {
	id      string
	store   contentv2.Store
	cs      content.Store // containerd's metadata content view
	metrics *prometheus.Registry
}

func (c *testCluster) addFollowNode(t *testing.T, id string, proxied bool, opts ...contentv2.Option) *followNode {
	t.Helper()
	client, err := lockclient.New(c.url, lockclient.WithNodeID(id))
	require.NoError(t, err)
	t.Cleanup(func() { client.Close() })
	dir := t.TempDir()
	reg := prometheus.NewRegistry()
	store, err := contentv2.NewStore(c.root, id, remote.New(client),
		append([]contentv2.Option{contentv2.WithStateDir(filepath.Join(dir, "state")), contentv2.WithRegisterer(reg)}, opts...)...)
	require.NoError(t, err)
	t.Cleanup(func() { store.Close() })
	var backend content.Store = store
	if proxied {
		sock := filepath.Join(dir, "sc.sock")
		srv, err := plugin.Listen(sock, store)
		require.NoError(t, err)
		go srv.Serve(context.Background())
		t.Cleanup(func() { srv.Stop(context.Background()) })
		conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(plugin.MaxMsgSize), grpc.MaxCallSendMsgSize(plugin.MaxMsgSize)))
		require.NoError(t, err)
		t.Cleanup(func() { conn.Close() })
		backend = proxy.NewContentStore(conn)
	}
	db, err := bolt.Open(filepath.Join(dir, "meta.db"), 0o600, nil)
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	mdb := metadata.NewDB(db, backend, nil)
	require.NoError(t, mdb.Init(context.Background()))
	return &followNode{id: id, store: store, cs: mdb.ContentStore(), metrics: reg}
}

// follows returns the node's count of followers that ended with result.
func (n *followNode) follows(result string) float64 {
	return metricOf(n.metrics, "sharedcontent_store_follows_total", "result", result).GetCounter().GetValue()
}

// gatedFetcher serves one blob like a registry, counting its GETs. A GET
// with a gate waits for it: nil serves the blob, an error fails the GET.
type gatedFetcher struct {
	data []byte
	gate chan error // nil: serve at once
	gets atomic.Int32
}

func (f *gatedFetcher) Fetch(ctx context.Context, desc ocispec.Descriptor) (io.ReadCloser, error) {
	f.gets.Add(1)
	if f.gate != nil {
		select {
		case err := <-f.gate:
			if err != nil {
				return nil, err
			}
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return io.NopCloser(bytes.NewReader(f.data)), nil
}

func followBlob(name string) ([]byte, ocispec.Descriptor) {
	b := bytes.Repeat([]byte(name), 64<<10)
	return b, ocispec.Descriptor{MediaType: ocispec.MediaTypeImageLayer, Digest: digest.FromBytes(b), Size: int64(len(b))}
}

// waitQueued waits until n requests wait in the queue of the blob's pull
// lock, and returns the holder's node.
func (c *testCluster) waitQueued(t *testing.T, client *lockclient.Client, dgst digest.Digest, n int) string {
	t.Helper()
	var holder string
	require.Eventually(t, func() bool {
		st, err := client.Status(context.Background(), api.OperationPull, dgst.String())
		if err != nil || st.Holder == nil {
			return false
		}
		holder = st.Holder.NodeID
		return len(st.Queue) == n
	}, 20*time.Second, 5*time.Millisecond, "%d followers queued on %s", n, dgst)
	return holder
}

// requireHasBlob checks that the node's own metadata has the blob and
// reads it back whole.
func requireHasBlob(t *testing.T, ctx context.Context, n *followNode, data []byte, desc ocispec.Descriptor) {
	t.Helper()
	info, err := n.cs.Info(ctx, desc.Digest)
	require.NoError(t, err, "%s records the blob in its metadata", n.id)
	require.Equal(t, desc.Size, info.Size)
	got, err := content.ReadBlob(ctx, n.cs, desc)
	require.NoError(t, err, "%s reads the blob", n.id)
	require.True(t, bytes.Equal(data, got), "%s reads the blob's bytes", n.id)
}

// followScene is what every follower test starts from: a cluster with an
// observer (to read the lock's queue and the references) and a node that
// will hold the blob's pull lock.
type followScene struct {
	c      *testCluster
	admin  *node
	holder *followNode
	ctx    context.Context
	data   []byte
	desc   ocispec.Descriptor
	ref    string
}

func newFollowScene(t *testing.T, blob string, proxied bool) *followScene {
	c := newCluster(t, 0)
	data, desc := followBlob(blob)
	return &followScene{c: c, admin: c.addNode(t, "observer"), holder: c.addFollowNode(t, "holder", proxied),
		ctx: nsContext(), data: data, desc: desc, ref: "layer-" + desc.Digest.String()}
}

// holdLock opens the holder's writer, which holds the pull lock until it
// commits or closes (closed at the end of the test).
func (s *followScene) holdLock(t *testing.T) content.Writer {
	t.Helper()
	w, err := s.holder.store.Writer(s.ctx, content.WithRef(s.ref), content.WithDescriptor(s.desc))
	require.NoError(t, err)
	t.Cleanup(func() { w.Close() })
	return w
}

// holderFetching starts the holder's fetch through a gated registry and
// returns once it is downloading; the fetch's outcome arrives on done.
func (s *followScene) holderFetching(t *testing.T) (gate *gatedFetcher, done <-chan error) {
	t.Helper()
	gate = &gatedFetcher{data: s.data, gate: make(chan error)}
	errc := make(chan error, 1)
	go func() { errc <- remotes.Fetch(s.ctx, s.holder.cs, gate, s.desc) }()
	require.Eventually(t, func() bool { return gate.gets.Load() == 1 }, 20*time.Second, 5*time.Millisecond, "the holder is downloading")
	return gate, errc
}

func forBothPaths(t *testing.T, run func(t *testing.T, proxied bool)) {
	for _, proxied := range []bool{false, true} {
		name := "in-process"
		if proxied {
			name = "proxy"
		}
		t.Run(name, func(t *testing.T) { run(t, proxied) })
	}
}

// TestFollowerSharesFinishedBlob: a node that opens a writer for a blob
// another node is downloading gets it at once; fetch's Status waits for
// the holder and reports the whole blob; the commit records it without a
// GET, and the follower is registered as a user at the coordinator.
func TestFollowerSharesFinishedBlob(t *testing.T) {
	forBothPaths(t, func(t *testing.T, proxied bool) {
		sc := newFollowScene(t, "shared ", proxied)
		c, admin, holder, ctx, data, desc := sc.c, sc.admin, sc.holder, sc.ctx, sc.data, sc.desc
		follower := c.addFollowNode(t, "follower", proxied)
		hf, holderDone := sc.holderFetching(t)

		ff := &gatedFetcher{data: data}
		followerDone := make(chan error, 1)
		go func() { followerDone <- remotes.Fetch(ctx, follower.cs, ff, desc) }()
		require.Equal(t, "holder", c.waitQueued(t, admin.client, desc.Digest, 1), "the follower waits behind the holder")
		sts, err := follower.cs.ListStatuses(ctx)
		require.NoError(t, err)
		require.Len(t, sts, 1, "the waiting follower is an ingest of its node")
		require.Zero(t, sts[0].Offset)

		hf.gate <- nil // the holder's download goes through
		require.NoError(t, <-holderDone)
		require.NoError(t, <-followerDone)
		require.Zero(t, ff.gets.Load(), "the follower did not download")
		require.Equal(t, 1.0, follower.follows("shared"))
		requireHasBlob(t, ctx, follower, data, desc)
		requireHasBlob(t, ctx, holder, data, desc)
		refs, err := admin.client.Refs(ctx, desc.Digest.String())
		require.NoError(t, err)
		require.ElementsMatch(t, []string{"holder", "follower"}, refs.Nodes, "both nodes are registered users")
		sts, err = follower.cs.ListStatuses(ctx)
		require.NoError(t, err)
		require.Empty(t, sts, "no ingest left behind")
	})
}

// TestFollowerHandOff: two followers wait while the holder's download
// fails; the lock goes to one of them, which downloads (one extra GET)
// while the other keeps waiting and then shares its blob.
func TestFollowerHandOff(t *testing.T) {
	forBothPaths(t, func(t *testing.T, proxied bool) {
		sc := newFollowScene(t, "handed ", proxied)
		c, admin, ctx, data, desc := sc.c, sc.admin, sc.ctx, sc.data, sc.desc
		followers := []*followNode{c.addFollowNode(t, "follower-1", proxied), c.addFollowNode(t, "follower-2", proxied)}
		hf, holderDone := sc.holderFetching(t)

		fetchers := make([]*gatedFetcher, len(followers))
		errs := make([]error, len(followers))
		var wg sync.WaitGroup
		for i, f := range followers {
			fetchers[i] = &gatedFetcher{data: data}
			wg.Go(func() { errs[i] = remotes.Fetch(ctx, f.cs, fetchers[i], desc) })
		}
		c.waitQueued(t, admin.client, desc.Digest, 2)

		hf.gate <- fmt.Errorf("registry went away")
		require.Error(t, <-holderDone)
		wg.Wait()
		var gets int32
		for i, f := range followers {
			require.NoError(t, errs[i], f.id)
			gets += fetchers[i].gets.Load()
			requireHasBlob(t, ctx, f, data, desc)
		}
		require.Equal(t, int32(1), gets, "one follower downloaded after the hand-off, the other shared it")
		require.Equal(t, 1.0, followers[0].follows("handed")+followers[1].follows("handed"))
		require.Equal(t, 1.0, followers[0].follows("shared")+followers[1].follows("shared"))
		refs, err := admin.client.Refs(ctx, desc.Digest.String())
		require.NoError(t, err)
		require.ElementsMatch(t, []string{"follower-1", "follower-2"}, refs.Nodes, "the failed holder holds no reference")
	})
}

// TestFollowerCommitNeverWaits: a follower's Commit before the holder has
// finished fails at once (it runs inside containerd's metadata
// transaction); Writer and the first Status do not wait either; Close ends
// a wait in progress and leaves the lock to the others.
func TestFollowerCommitNeverWaits(t *testing.T) {
	sc := newFollowScene(t, "never waits ", false)
	c, admin, ctx, data, desc, ref := sc.c, sc.admin, sc.ctx, sc.data, sc.desc, sc.ref
	follower := c.addFollowNode(t, "follower", false)
	hw := sc.holdLock(t)
	_, isFollower := hw.(contentv2.Follower)
	require.False(t, isFollower, "the first node holds the lock")

	// Nothing below may wait for the holder, who finishes only at the end:
	// a wait would end in the context's deadline instead.
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	fw, err := follower.store.Writer(wctx, content.WithRef(ref), content.WithDescriptor(desc))
	require.NoError(t, err)
	f, ok := fw.(contentv2.Follower)
	require.True(t, ok, "a blob held elsewhere gets a follower")
	_, err = follower.store.Writer(wctx, content.WithRef("layer-nosize-"+desc.Digest.String()), content.WithDescriptor(ocispec.Descriptor{Digest: desc.Digest}))
	require.True(t, errdefs.IsUnavailable(err), "without the size there is no follower; containerd retries: %v", err)
	st, err := f.StatusNow()
	require.NoError(t, err)
	require.Equal(t, content.Status{Ref: ref, Total: desc.Size, Expected: desc.Digest, StartedAt: st.StartedAt, UpdatedAt: st.UpdatedAt}, st)
	err = f.Commit(wctx, desc.Size, desc.Digest)
	require.True(t, errdefs.IsFailedPrecondition(err), "commit before the outcome fails at once: %v", err)
	st, err = follower.store.Status(ctx, ref)
	require.NoError(t, err, "the follower is an ingest of its node")
	require.Zero(t, st.Offset)

	// A follower closed while waiting leaves the queue.
	waited := make(chan error, 1)
	go func() { _, err := f.Status(); waited <- err }()
	c.waitQueued(t, admin.client, desc.Digest, 1)
	require.NoError(t, follower.store.Abort(ctx, ref), "aborting a follower's ref")
	require.ErrorIs(t, <-waited, context.Canceled, "the wait ended")
	c.waitQueued(t, admin.client, desc.Digest, 0)
	_, err = follower.store.Status(ctx, ref)
	require.True(t, errdefs.IsNotFound(err), "no ingest left: %v", err)

	_, err = hw.Write(data)
	require.NoError(t, err)
	require.NoError(t, hw.Commit(ctx, desc.Size, desc.Digest))
}

// TestFollowerLeavesMetadataFree: opening a writer for a blob held
// elsewhere returns while the holder still holds it (through the proxy:
// the negotiation's STAT is answered at once), and while the follower
// waits in Status the node's metadata store serves other writes. The
// follower then commits the holder's blob.
func TestFollowerLeavesMetadataFree(t *testing.T) {
	forBothPaths(t, func(t *testing.T, proxied bool) {
		sc := newFollowScene(t, "metadata free ", proxied)
		c, admin, ctx, data, desc, ref := sc.c, sc.admin, sc.ctx, sc.data, sc.desc, sc.ref
		follower := c.addFollowNode(t, "follower", proxied)
		hw := sc.holdLock(t)

		// The holder finishes only at the end: a wait in Writer would end
		// in this deadline instead.
		wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		mw, err := content.OpenWriter(wctx, follower.cs, content.WithRef(ref), content.WithDescriptor(desc))
		require.NoError(t, err, "the writer opens while the blob is held elsewhere")
		defer mw.Close()
		type status struct {
			st  content.Status
			err error
		}
		waited := make(chan status, 1)
		go func() {
			st, err := mw.Status()
			waited <- status{st, err}
		}()
		c.waitQueued(t, admin.client, desc.Digest, 1)

		other, odesc := followBlob("another blob ")
		require.NoError(t, content.WriteBlob(wctx, follower.cs, "layer-"+odesc.Digest.String(), bytes.NewReader(other), odesc),
			"the node's metadata serves other writes while the follower waits")
		st, err := follower.cs.Status(wctx, ref)
		require.NoError(t, err, "the waiting follower is an ingest of its node")
		require.Zero(t, st.Offset)
		require.Equal(t, desc.Size, st.Total)

		_, err = hw.Write(data)
		require.NoError(t, err)
		require.NoError(t, hw.Commit(ctx, desc.Size, desc.Digest))
		s := <-waited
		require.NoError(t, s.err)
		require.Equal(t, desc.Size, s.st.Offset, "Status reports the finished blob")
		require.NoError(t, mw.Commit(wctx, desc.Size, desc.Digest))
		requireHasBlob(t, ctx, follower, data, desc)
		requireHasBlob(t, ctx, follower, other, odesc)
	})
}

// TestLibraryModeWaitsInWriter: used directly (library mode), Writer for a
// blob held elsewhere waits in the queue, and answers ErrAlreadyExists
// once the holder has committed it, with this node registered as a user.
func TestLibraryModeWaitsInWriter(t *testing.T) {
	sc := newFollowScene(t, "library ", false)
	c, admin, ctx, data, desc, ref := sc.c, sc.admin, sc.ctx, sc.data, sc.desc, sc.ref
	lib := c.addFollowNode(t, "library", false, contentv2.WithMode(contentv2.LibraryMode))
	hw := sc.holdLock(t)
	opened := make(chan error, 1)
	go func() {
		w, err := lib.store.Writer(ctx, content.WithRef(ref), content.WithDescriptor(desc))
		if err == nil {
			w.Close()
		}
		opened <- err
	}()
	c.waitQueued(t, admin.client, desc.Digest, 1)
	_, err := hw.Write(data)
	require.NoError(t, err)
	require.NoError(t, hw.Commit(ctx, desc.Size, desc.Digest))
	err = <-opened
	require.True(t, errdefs.IsAlreadyExists(err), "the blob was downloaded elsewhere: %v", err)
	refs, err := admin.client.Refs(ctx, desc.Digest.String())
	require.NoError(t, err)
	require.ElementsMatch(t, []string{"holder", "library"}, refs.Nodes)
	got, err := content.ReadBlob(ctx, lib.store, desc)
	require.NoError(t, err)
	require.True(t, bytes.Equal(data, got))
}

// TestFollowerCoordinatorLost: the coordinator goes away while a follower
// waits. The follower keeps asking until this node's session has surely
// expired, then downloads uncoordinated (docs/design.md §8.8) and journals
// its use, which reaches the coordinator when it is back.
func TestFollowerCoordinatorLost(t *testing.T) {
	e := newFaultEnv(t, faultConfig())
	holder, follower := e.addNode("holder"), e.addNode("follower")
	e.coord.waitSynced(t, "holder", "follower")
	ctx := nsContext()
	data, desc := followBlob("coordinator lost ")
	ref := "layer-" + desc.Digest.String()

	hw, err := holder.Store.Writer(ctx, content.WithRef(ref), content.WithDescriptor(desc))
	require.NoError(t, err)
	defer hw.Close()
	ff := &gatedFetcher{data: data}
	fetched := make(chan error, 1)
	go func() { fetched <- remotes.Fetch(ctx, follower.CS, ff, desc) }()
	require.Eventually(t, func() bool {
		st, err := e.coord.admin.Status(ctx, api.OperationPull, desc.Digest.String())
		return err == nil && len(st.Queue) == 1
	}, 20*time.Second, 5*time.Millisecond, "the follower waits behind the holder")

	e.coord.Stop()
	stopped := time.Now()
	require.NoError(t, <-fetched, "the follower downloads once its session has surely expired")
	// The session's last answer came at most TTL/3 before the stop, so the
	// node waits at least 2/3 TTL + TTL/10 + contentv2's 2 s margin.
	require.GreaterOrEqual(t, time.Since(stopped), 2*time.Second, "not before this node's session could have expired")
	require.Equal(t, int32(1), ff.gets.Load())
	require.Equal(t, 1.0, follower.counter("sharedcontent_store_follows_total", "result", "uncoordinated"))
	got, err := content.ReadBlob(ctx, follower.CS, desc)
	require.NoError(t, err)
	require.True(t, bytes.Equal(data, got))

	e.coord.Start()
	e.coord.waitSynced(t, "holder", "follower")
	refs, err := e.coord.Refs(ctx, desc.Digest)
	require.NoError(t, err)
	require.Contains(t, refs, "follower", "the uncoordinated use reached the coordinator with the sync")
	// The holder's pull lease, adopted by the restarted coordinator,
	// expires a lease TTL later and then records the holder's reference
	// if its session is live (docs/design.md §8.17): when the holder's
	// reference shows depends on that race, never the lease still held.
	require.Subset(t, []string{"follower", "holder"}, refs, "references of %s", desc.Digest)
	if slices.Contains(refs, "holder") {
		st, err := e.coord.admin.Status(ctx, api.OperationPull, desc.Digest.String())
		require.NoError(t, err)
		require.Nil(t, st.Holder, "the holder's reference is recorded only once its lease has ended")
	}
}
