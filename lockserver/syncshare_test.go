package lockserver

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/containerd/errdefs"
	"github.com/stretchr/testify/require"

	"github.com/sharedcontent/sharedcontent/lockserver/api"
	"github.com/sharedcontent/sharedcontent/refcount"
)

// shareStorage is a bbolt store that records, per commit, the nodes whose
// references it adds, and fails its commits while fail is set.
type shareStorage struct {
	refcount.Storage
	fail    atomic.Bool
	gate    chan struct{} // when set, a commit waits until it is closed
	ended   atomic.Int32  // commits of AddRefs returned
	mu      sync.Mutex
	commits [][]string // the nodes each commit of AddRefs added for
}

func (s *shareStorage) Commit(ctx context.Context, b *refcount.Batch) error {
	nodes := map[string]bool{}
	var order []string
	for _, op := range b.Writes() {
		if op.Kind == refcount.WriteAddRef && !nodes[op.Node] {
			nodes[op.Node] = true
			order = append(order, op.Node)
		}
	}
	if len(order) > 0 {
		s.mu.Lock()
		s.commits = append(s.commits, order)
		s.mu.Unlock()
	}
	if len(order) > 0 && s.gate != nil {
		<-s.gate
	}
	if len(order) > 0 {
		defer s.ended.Add(1)
	}
	if s.fail.Load() {
		return fmt.Errorf("disk on fire: %w", errdefs.ErrUnavailable)
	}
	return s.Storage.Commit(ctx, b)
}

// addRefs is a first sync's fill (syncShare.write): node adds each of ids.
func addRefs(node string, ids []string) func(*refcount.Batch) {
	return func(b *refcount.Batch) {
		for _, id := range ids {
			b.AddRef(id, node).Break()
		}
	}
}

func (s *shareStorage) addCommits() [][]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([][]string(nil), s.commits...)
}

// newShareCoordinator is a Coordinator over a bbolt file (shareStorage).
func newShareCoordinator(t *testing.T, mutate func(*Config)) (*Coordinator, *shareStorage) {
	t.Helper()
	bs, err := refcount.OpenBoltStorage(filepath.Join(t.TempDir(), "refs.db"))
	require.NoError(t, err)
	t.Cleanup(func() { bs.Close() })
	s := &shareStorage{Storage: bs}
	cfg := DefaultConfig()
	mutate(&cfg)
	c, err := NewCoordinator(cfg, Options{Refs: refcount.NewManager(s)})
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	return c, s
}

// firstSync sends node's whole journal (ids, from generation "g-node"),
// and returns the answer to its done (sendSync).
func firstSync(c *Coordinator, node string, ids []string) (api.SyncResponse, error) {
	return sendSync(context.Background(), c, node, "s-"+node, "g-"+node, ids)
}

// sendSync sends node's journal in chunks (as an older node: no steps),
// renews its session, and returns the answer to the done, sent with ctx;
// a request refused as busy (429) it sends again after a pause, as
// lockclient does.
func sendSync(ctx context.Context, c *Coordinator, node, syncID, gen string, journal []string) (api.SyncResponse, error) {
	send := func(ctx context.Context, req api.SyncRequest) (api.SyncResponse, error) {
		for {
			resp, err := c.SyncRefs(ctx, node, req)
			if !errors.Is(err, api.ErrTooManyRequests) {
				return resp, err
			}
			time.Sleep(time.Millisecond)
		}
	}
	sent := 0
	for ; sent+api.MaxSyncChunk < len(journal); sent += api.MaxSyncChunk {
		if _, err := send(context.Background(), api.SyncRequest{SyncID: syncID, Generation: gen, ResourceIDs: journal[sent : sent+api.MaxSyncChunk]}); err != nil {
			return api.SyncResponse{}, err
		}
	}
	if _, err := renew(c, node); err != nil {
		return api.SyncResponse{}, err
	}
	return send(ctx, api.SyncRequest{SyncID: syncID, Generation: gen, ResourceIDs: journal[sent:], Done: true, Echo: echoOf(c, node)})
}

// TestFirstSyncsShareTransaction (docs/design.md §10.9): first syncs of
// several nodes that arrive within the window share one transaction, even
// with one sync slot (a write waiting for its transaction gives its slot
// back); each node is synced and its references stored once it commits.
// The window is an hour: the transaction commits because it is full, so
// nothing here depends on timing.
func TestFirstSyncsShareTransaction(t *testing.T) {
	const nodes, refs = 4, 3
	c, s := newShareCoordinator(t, func(cfg *Config) {
		cfg.MaxSyncs = 1
		cfg.FirstSyncWindow = time.Hour
		cfg.FirstSyncRefs = nodes * refs
	})
	errs := make(chan error, nodes)
	for i := range nodes {
		session(t, c, fmt.Sprintf("n%d", i))
	}
	for i := range nodes {
		go func() {
			node := fmt.Sprintf("n%d", i)
			resp, err := firstSync(c, node, ids(refs, node+"-"))
			if err == nil && (!resp.Synced || resp.Received != refs) {
				err = fmt.Errorf("node %s: answered %+v", node, resp)
			}
			errs <- err
		}()
	}
	for range nodes {
		require.NoError(t, <-errs)
	}
	commits := s.addCommits()
	require.Len(t, commits, 1, "one transaction for the %d first syncs: %v", nodes, commits)
	require.Len(t, commits[0], nodes)
	for i := range nodes {
		node := fmt.Sprintf("n%d", i)
		require.True(t, synced(t, c, node), node)
		for _, id := range ids(refs, node+"-") {
			require.Equal(t, []string{node}, refsOf(t, c, id))
		}
	}
}

// TestFirstSyncWindow: a lone first sync waits for company until its
// window ends, then commits alone; a sync bigger than the bound goes
// alone at once, and a write that does not fit in the open transaction
// starts the next one. Asserted from the transactions' recorded times
// and members, not from a clock.
func TestFirstSyncWindow(t *testing.T) {
	const window = 50 * time.Millisecond
	c, s := newShareCoordinator(t, func(cfg *Config) {
		cfg.FirstSyncWindow = window
		cfg.FirstSyncRefs = 4
	})
	var txs []*sharedTx
	var mu sync.Mutex
	record := func(node string, n int) {
		t.Helper()
		tx, err := c.syncs.share.write(context.Background(), node, n, addRefs(node, ids(n, node+"-")), func() {})
		require.NoError(t, err)
		mu.Lock()
		txs = append(txs, tx)
		mu.Unlock()
	}
	record("lone", 1)
	require.GreaterOrEqual(t, txs[0].committed.Sub(txs[0].opened), window, "a lone write waits out its window")

	// A write over the bound: its transaction is full at once.
	big := make(chan struct{})
	go func() { defer close(big); record("big", 9) }()
	<-big
	require.Equal(t, 1, txs[1].writes)

	// Two writes of 3: the second does not fit and starts the next.
	joined := make(chan int, 2)
	c.syncs.share.joined = func(_ string, writes int) { joined <- writes }
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); record("a", 3) }()
	require.Equal(t, 1, <-joined)
	wg.Add(1)
	go func() { defer wg.Done(); record("b", 3) }()
	require.Equal(t, 1, <-joined, "b opened a transaction of its own")
	wg.Wait()
	require.NotSame(t, txs[2], txs[3])
	require.Equal(t, [][]string{{"lone"}, {"big"}, {"a"}, {"b"}}, s.addCommits())
}

// TestFirstSyncsSharedFailure: when a shared transaction fails, each of
// its nodes' syncs fails with the store's error, naming the node; none is
// synced, and each syncs again once the store works.
func TestFirstSyncsSharedFailure(t *testing.T) {
	const nodes = 3
	c, s := newShareCoordinator(t, func(cfg *Config) {
		cfg.FirstSyncWindow = time.Hour
		cfg.FirstSyncRefs = nodes
	})
	for i := range nodes {
		session(t, c, fmt.Sprintf("n%d", i))
	}
	s.fail.Store(true)
	errs := make([]error, nodes)
	var wg sync.WaitGroup
	for i := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = firstSync(c, fmt.Sprintf("n%d", i), []string{fmt.Sprintf("sha256:r%d", i)})
		}()
	}
	wg.Wait()
	require.Len(t, s.addCommits(), 1, "the three syncs shared one transaction")
	for i, err := range errs {
		node := fmt.Sprintf("n%d", i)
		require.Error(t, err, node)
		require.True(t, errdefs.IsUnavailable(err), "%s: the store's class: %v", node, err)
		require.ErrorContains(t, err, "of node "+node+",")
		require.ErrorContains(t, err, "disk on fire")
		require.False(t, synced(t, c, node), node)
		require.Empty(t, refsOf(t, c, fmt.Sprintf("sha256:r%d", i)))
	}

	s.fail.Store(false)
	for i := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = firstSync(c, fmt.Sprintf("n%d", i), []string{fmt.Sprintf("sha256:r%d", i)})
		}()
	}
	wg.Wait()
	require.NoError(t, errors.Join(errs...))
	for i := range nodes {
		node := fmt.Sprintf("n%d", i)
		require.True(t, synced(t, c, node), node)
		require.Equal(t, []string{node}, refsOf(t, c, fmt.Sprintf("sha256:r%d", i)))
	}
}

// TestBigSyncStopsBetweenSlices (docs/design.md §10.5): a first sync
// bigger than a shared transaction is written alone, a slice
// (refcount.SliceRefs) a transaction; when its request's context ends
// after the first slice (a SIGTERM: the server's shutdown cancels the
// requests in flight), no further slice is written, the sync fails
// saying so, the node is not synced, and its generation is not recorded:
// its next sync adds every reference again and makes it synced.
func TestBigSyncStopsBetweenSlices(t *testing.T) {
	bs, err := refcount.OpenBoltStorage(filepath.Join(t.TempDir(), "refs.db"))
	require.NoError(t, err)
	t.Cleanup(func() { bs.Close() })
	cfg := DefaultConfig()
	cfg.FirstSyncRefs = 10
	c, err := NewCoordinator(cfg, Options{Refs: refcount.NewManager(bs)})
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	journal := ids(2*100+10, "big-")
	session(t, c, "n1")
	ctx, cancel := context.WithCancel(context.Background())
	slicesDone := 0
	const slice = 100
	c.syncs.sliceRefs = slice
	c.syncs.syncLimits.writeHook = func(node, stage string) {
		if node == "n1" && stage == "slice" {
			slicesDone++
			cancel()
		}
	}
	_, err = sendSync(ctx, c, "n1", "s1", "g1", journal)
	require.ErrorIs(t, err, context.Canceled)
	require.ErrorIs(t, err, api.ErrUnavailable, "a stopped write is unavailable to the node, not an internal error")
	require.ErrorContains(t, err, "stopped after 1 of its 3 transactions")
	require.Equal(t, 1, slicesDone)
	require.False(t, synced(t, c, "n1"))
	stored, err := bs.NodeRefs(context.Background(), "n1")
	require.NoError(t, err)
	require.Len(t, stored, slice, "the first slice only")

	c.syncs.syncLimits.writeHook = nil
	_, err = sendSync(context.Background(), c, "n1", "s2", "g1", journal)
	require.NoError(t, err)
	require.True(t, synced(t, c, "n1"))
	stored, err = bs.NodeRefs(context.Background(), "n1")
	require.NoError(t, err)
	slices.Sort(stored)
	require.Equal(t, journal, stored)
}

// TestFirstSyncsBoundedTransactions: while a shared transaction commits,
// first syncs fill one more, and the rest wait for room without a batch
// of their own: never more than two shared transactions hold writes at
// once (was one per FirstSyncRefs references a fleet's syncs brought
// meanwhile: the coordinator's memory during a fleet's first syncs).
// Asserted at every join from the transactions opened and the commits
// ended, the commits held until the other writes wait.
func TestFirstSyncsBoundedTransactions(t *testing.T) {
	const writers, refs = 8, 3
	c, s := newShareCoordinator(t, func(cfg *Config) {
		cfg.FirstSyncWindow = time.Hour // a transaction ends full, not by its window
		cfg.FirstSyncRefs = 2 * refs
	})
	s.gate = make(chan struct{})
	sh := c.syncs.share
	// Under sh.mu (the hooks run under it).
	opened, most := 0, 0
	in := map[string]string{} // node: joined or waits
	changed := make(chan struct{}, 1)
	note := func() {
		select {
		case changed <- struct{}{}:
		default:
		}
	}
	sh.joined = func(node string, writes int) {
		if writes == 1 {
			opened++
		}
		in[node] = "joined"
		most = max(most, opened-int(s.ended.Load()))
		note()
	}
	sh.waited = func(node string) { in[node] = "waits"; note() }
	count := func(state string) (n int) {
		for _, st := range in {
			if st == state {
				n++
			}
		}
		return n
	}
	var wg sync.WaitGroup
	errs := make([]error, writers)
	for i := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			node := fmt.Sprintf("n%d", i)
			_, errs[i] = sh.write(context.Background(), node, refs, addRefs(node, ids(refs, node+"-")), func() {})
		}()
	}
	// Until two transactions are full (the first held in its commit) and
	// the other four writes wait, or a third transaction opened.
	for {
		<-changed
		sh.mu.Lock()
		stop := most > 2 || count("joined") == writers || (count("joined") == 4 && count("waits") == writers-4)
		sh.mu.Unlock()
		if stop {
			break
		}
	}
	sh.mu.Lock()
	require.LessOrEqual(t, most, 2, "shared transactions holding writes at once, the commits held")
	sh.mu.Unlock()
	close(s.gate)
	wg.Wait()
	for i, err := range errs {
		require.NoError(t, err, "n%d", i)
	}
	sh.mu.Lock()
	defer sh.mu.Unlock()
	require.LessOrEqual(t, most, 2, "shared transactions holding writes at once")
	require.Len(t, s.addCommits(), writers/2)
	for i := range writers {
		node := fmt.Sprintf("n%d", i)
		for _, id := range ids(refs, node+"-") {
			require.Equal(t, []string{node}, refsOf(t, c, id))
		}
	}
}
