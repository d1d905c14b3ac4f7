package contentv2_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/containerd/containerd/v2/core/content"
	"github.com/containerd/containerd/v2/plugins/content/local"
	"github.com/containerd/errdefs"
	"github.com/opencontainers/go-digest"
	"github.com/stretchr/testify/require"

	"github.com/sharedcontent/sharedcontent/contentv2"
	"github.com/sharedcontent/sharedcontent/contentv2/contentv2test"
	"github.com/sharedcontent/sharedcontent/contentv2/remote"
	"github.com/sharedcontent/sharedcontent/lockclient"
	"github.com/sharedcontent/sharedcontent/lockserver"
	"github.com/sharedcontent/sharedcontent/lockserver/lockservertest"
)

// failingRoot is node 1's local store on the shared root while the root
// fails as GlusterFS does with every brick down (ENOTCONN): with opens
// set, a writer's open makes the ingest directory and its ref, then fails
// before the data file exists; with aborts set, removing an ingest fails.
type failingRoot struct {
	content.Store
	root string

	mu            sync.Mutex
	opens, aborts bool           // protected by mu
	openCalls     map[string]int // protected by mu; Writer calls by ref
	// lockedSinceBack counts those refused because a writer of the ref
	// is open, since the root was last back (backAt). Protected by mu.
	lockedSinceBack map[string]int
	backAt          time.Time
	abortedAt       map[string]time.Time // protected by mu; the last removal of each ref
}

func newFailingRoot(t *testing.T, root string) *failingRoot {
	cs, err := local.NewStore(root)
	require.NoError(t, err)
	return &failingRoot{Store: cs, root: root, openCalls: map[string]int{},
		abortedAt: map[string]time.Time{}, lockedSinceBack: map[string]int{}}
}

func (f *failingRoot) set(opens, aborts bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.opens, f.aborts = opens, aborts
	if !opens && !aborts {
		f.backAt = time.Now()
		f.lockedSinceBack = map[string]int{}
	}
}

func (f *failingRoot) Writer(ctx context.Context, opts ...content.WriterOpt) (content.Writer, error) {
	var wo content.WriterOpts
	for _, o := range opts {
		_ = o(&wo) // the local store reports a bad option
	}
	f.mu.Lock()
	f.openCalls[wo.Ref]++
	fail := f.opens
	f.mu.Unlock()
	w, err := f.Store.Writer(ctx, opts...)
	if errdefs.IsUnavailable(err) {
		f.mu.Lock()
		f.lockedSinceBack[wo.Ref]++
		f.mu.Unlock()
	}
	if err != nil || !fail {
		return w, err
	}
	// The local store wrote the ref, then creating the data failed.
	if err := w.Close(); err != nil {
		return nil, err
	}
	if err := os.Remove(filepath.Join(ingestDir(f.root, wo.Ref), "data")); err != nil {
		return nil, err
	}
	return nil, fmt.Errorf("failed to open data file: open %s: %w", filepath.Join(ingestDir(f.root, wo.Ref), "data"), syscall.ENOTCONN)
}

func (f *failingRoot) Abort(ctx context.Context, ref string) error {
	f.mu.Lock()
	fail := f.aborts
	f.mu.Unlock()
	if fail {
		return &os.PathError{Op: "unlinkat", Path: ingestDir(f.root, ref), Err: syscall.ENOTCONN}
	}
	err := f.Store.Abort(ctx, ref)
	if err == nil {
		f.mu.Lock()
		f.abortedAt[ref] = time.Now()
		f.mu.Unlock()
	}
	return err
}

// calls returns how many Writer calls ref had, and how many were refused
// since the root was back because a writer of it was open.
func (f *failingRoot) calls(ref string) (opens, locked int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.openCalls[ref], f.lockedSinceBack[ref]
}

// removed returns when ref was last removed, and when the root was last
// back.
func (f *failingRoot) removed(ref string) (at, back time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.abortedAt[ref], f.backAt
}

// ingestDir is where containerd's local store keeps the ingest ref.
func ingestDir(root, ref string) string {
	return filepath.Join(root, "ingest", digest.FromString(ref).Encoded())
}

// halfMadeEnv is two containerd nodes (their own metadata and GC) on one
// shared root and one real coordinator; node 1 sees the root through a
// failingRoot.
type halfMadeEnv struct {
	ctx    context.Context
	root   string
	fr     *failingRoot
	n1, n2 *contentv2test.Node
}

func newHalfMadeEnv(t *testing.T) *halfMadeEnv {
	const ttl = 600 * time.Millisecond // the root is probed every ttl/3
	cfg := lockserver.DefaultConfig()
	cfg.SessionTTL = ttl
	coord := lockservertest.Start(t, lockservertest.WithConfig(cfg))
	e := &halfMadeEnv{ctx: contentv2test.Context(context.Background()), root: t.TempDir()}
	e.fr = newFailingRoot(t, e.root)
	node := func(id string, opts ...contentv2.Option) *contentv2test.Node {
		c, err := lockclient.New(coord.URL(), lockclient.WithNodeID(id))
		require.NoError(t, err)
		t.Cleanup(func() { c.Close() })
		n, err := contentv2test.NewNode(e.ctx, id, e.root, t.TempDir(), remote.New(c), append(opts, contentv2.WithSessionTTL(ttl))...)
		require.NoError(t, err)
		t.Cleanup(func() { n.Close() })
		return n
	}
	e.n1 = node("node-1", contentv2.WithLocalStore(e.fr))
	e.n2 = node("node-2")
	return e
}

// collect runs n's containerd GC with its content pass: an unreferenced
// blob written through n's metadata is collected (containerd runs the
// content pass only after removing some content; its errors are only
// logged, a failed listing ends it before it aborts stale ingests).
func (e *halfMadeEnv) collect(t *testing.T, n *contentv2test.Node, s string) {
	data, desc := blob(s)
	require.NoError(t, content.WriteBlob(e.ctx, n.CS, "unreferenced-"+s, bytes.NewReader(data), desc))
	_, err := n.DB.GarbageCollect(e.ctx)
	require.NoError(t, err)
	_, err = n.CS.Info(e.ctx, desc.Digest)
	require.ErrorIs(t, err, errdefs.ErrNotFound, "the GC collected the unreferenced blob")
}

// failOpen has node 1 open a writer of ref while the root fails: the open
// fails, and so does its discard, leaving the half-made ingest.
func (e *halfMadeEnv) failOpen(t *testing.T, ref, s string) {
	_, desc := blob(s)
	e.fr.set(true, true)
	_, err := e.n1.Store.Writer(e.ctx, content.WithRef(ref), content.WithDescriptor(desc))
	require.ErrorIs(t, err, syscall.ENOTCONN)
	dir := ingestDir(e.root, "node-1/"+ref)
	require.FileExists(t, filepath.Join(dir, "ref"), "the failed open left its ref")
	require.NoFileExists(t, filepath.Join(dir, "data"), "and no data")
}

// TestHalfMadeIngestNeverFailsListings (docs/design.md §8.18): node 1's
// open of a writer fails between writing the ingest's ref and creating
// its data, and removing it fails the same way (the GlusterFS chaos run).
// containerd's own store then fails every listing of the shared ingests;
// this store's listings (both nodes'), and so containerd's GC, still work.
// Once the root is back, node 1 removes the directory.
func TestHalfMadeIngestNeverFailsListings(t *testing.T) {
	e := newHalfMadeEnv(t)
	t.Cleanup(func() { e.fr.set(false, false) })
	e.failOpen(t, "layer-a", "half made ")
	dir := ingestDir(e.root, "node-1/layer-a")

	plain, err := local.NewStore(e.root)
	require.NoError(t, err)
	_, err = plain.ListStatuses(e.ctx)
	require.Error(t, err, "containerd's own store fails its listing on the half-made ingest")

	// Node 2 has an ingest its metadata does not know: its GC aborts it
	// only if its listing works.
	w, err := e.n2.Store.Writer(e.ctx, content.WithRef("orphan"))
	require.NoError(t, err)
	_, err = w.Write([]byte("partial"))
	require.NoError(t, err)
	require.NoError(t, w.Close())
	sts, err := e.n2.Store.ListStatuses(e.ctx)
	require.NoError(t, err, "another node's listing skips the half-made ingest")
	require.Len(t, sts, 1)
	require.Equal(t, "orphan", sts[0].Ref)
	require.Equal(t, int64(len("partial")), sts[0].Offset)
	e.collect(t, e.n2, "node 2 ")
	_, err = e.n2.Store.Status(e.ctx, "orphan")
	require.ErrorIs(t, err, errdefs.ErrNotFound, "node 2's content GC listed its ingests and aborted the orphan")

	sts, err = e.n1.Store.ListStatuses(e.ctx)
	require.NoError(t, err, "the node's own listing skips it too")
	require.Empty(t, sts)

	// While the root still fails, each retry fails and keeps the directory.
	require.Eventually(t, func() bool { n, _ := e.fr.calls("node-1/layer-a"); return n >= 3 }, time.Minute, 5*time.Millisecond,
		"the root's probes retry the removal")
	require.FileExists(t, filepath.Join(dir, "ref"), "kept while the root fails")

	e.fr.set(false, false)
	require.Eventually(t, func() bool { _, err := os.Stat(dir); return os.IsNotExist(err) }, time.Minute, 5*time.Millisecond,
		"removed once the root is back")
	removed, back := e.fr.removed("node-1/layer-a")
	require.False(t, removed.IsZero() || removed.Before(back), "removed by a retry after the root was back (removed %v, back %v)", removed, back)
	_, err = plain.ListStatuses(e.ctx)
	require.NoError(t, err, "containerd's own store lists the ingests again")
}

// TestHalfMadeIngestKeepsLiveWriter: a half-made ingest that a writer of
// its ref has opened again (and made whole) is never removed while the
// writer is open; the blob commits and reads back.
func TestHalfMadeIngestKeepsLiveWriter(t *testing.T) {
	e := newHalfMadeEnv(t)
	t.Cleanup(func() { e.fr.set(false, false) })
	const ref = "layer-b"
	e.failOpen(t, ref, "live writer ")
	nref := "node-1/" + ref
	dir := ingestDir(e.root, nref)

	// The root answers opens again, not yet removals: the writer opens
	// over the half-made directory before any retry could remove it.
	e.fr.set(false, true)
	data, desc := blob("live writer ")
	// A retry holds the ref's lock for a moment: OpenWriter waits it out,
	// as containerd's fetch does.
	w, err := content.OpenWriter(e.ctx, e.n1.Store, content.WithRef(ref), content.WithDescriptor(desc))
	require.NoError(t, err)
	defer w.Close()
	half := len(data) / 2
	_, err = w.Write(data[:half])
	require.NoError(t, err)

	e.fr.set(false, false)
	require.Eventually(t, func() bool { _, n := e.fr.calls(nref); return n >= 2 }, time.Minute, 5*time.Millisecond,
		"retries after the root is back meet the open writer")
	require.FileExists(t, filepath.Join(dir, "data"), "the live writer's ingest is kept")
	st, err := e.n1.Store.Status(e.ctx, ref)
	require.NoError(t, err)
	require.Equal(t, int64(half), st.Offset)
	_, err = w.Write(data[half:])
	require.NoError(t, err)
	require.NoError(t, w.Commit(e.ctx, desc.Size, desc.Digest))

	ra, err := e.n1.Store.ReaderAt(e.ctx, desc)
	require.NoError(t, err)
	defer ra.Close()
	got := make([]byte, desc.Size)
	_, err = ra.ReadAt(got, 0)
	require.NoError(t, err)
	require.Equal(t, data, got, "the blob the live writer committed reads back")
	require.Eventually(t, func() bool { _, err := os.Stat(dir); return os.IsNotExist(err) }, time.Minute, 5*time.Millisecond,
		"no ingest of the ref is left")
}
