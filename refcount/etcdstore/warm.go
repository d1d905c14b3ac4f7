package etcdstore

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/sharedcontent/sharedcontent/internal/synchash"
	"github.com/sharedcontent/sharedcontent/refcount"
)

// DefaultWarmWait is how long NodeHashes waits at most for the watch to
// deliver every event up to the revision it asks for.
const DefaultWarmWait = 5 * time.Second

// warmPage is how many keys one read of the warm walk asks for.
const warmPage = 20000

// progressEvery is how often a pending NodeHashes asks etcd again for
// the watch's progress (etcd answers only a watch that has caught up).
const progressEvery = 100 * time.Millisecond

// Warm keeps every node's hash (synchash.Table) of the references stored
// under a prefix current, as a standby's, so that the replica that wins
// the election need not walk every reference before it serves
// (docs/design.md §7.2): one walk of refs/ at one revision, then a watch
// of refs/ from the next one. A key's creation adds its resource to its
// node's hash, its deletion removes it; a write over a key that exists
// changes nothing. A compacted, cancelled or broken watch makes it cold
// (NodeHashes fails, and the new leader walks) until another walk and
// watch have started; it retries until its context ends.
type Warm struct {
	cli  *clientv3.Client
	k    keys
	wait time.Duration

	mu sync.Mutex
	// byNode are the hashes as of revision through: every event of refs/
	// up to it applied, none after. nil: cold.
	byNode  map[string]*synchash.Table
	through int64
	cold    error // why it is cold; protected by mu
	asks    []*warmAsk
	kick    chan struct{} // an ask arrived
	stopped chan struct{}
	walks   int // walks made; protected by mu
	// afterWalk, when set (by tests), is called after each walk, before
	// its hashes are kept and the watch starts.
	afterWalk func(walk int)
}

var _ refcount.HashSource = (*Warm)(nil)

// warmAsk is a NodeHashes waiting for the hashes of a revision.
type warmAsk struct {
	rev   int64
	reply chan map[string]*synchash.Table
}

// StartWarm starts keeping the hashes of the references under prefix
// (the store's, Options.Prefix) until ctx ends; wait bounds NodeHashes'
// wait for the watch (0: DefaultWarmWait).
func StartWarm(ctx context.Context, cli *clientv3.Client, prefix string, wait time.Duration) *Warm {
	return startWarm(ctx, cli, prefix, wait, nil)
}

func startWarm(ctx context.Context, cli *clientv3.Client, prefix string, wait time.Duration, afterWalk func(int)) *Warm {
	if !strings.HasSuffix(prefix, "/") {
		prefix += "/"
	}
	if wait <= 0 {
		wait = DefaultWarmWait
	}
	w := &Warm{cli: cli, k: keys{prefix}, wait: wait, cold: errors.New("the first walk has not ended"),
		kick: make(chan struct{}, 1), stopped: make(chan struct{}), afterWalk: afterWalk}
	go w.run(ctx)
	return w
}

// Stopped is closed once the Warm stopped (its context ended).
func (w *Warm) Stopped() <-chan struct{} { return w.stopped }

// Walks returns how many walks of the references the Warm made.
func (w *Warm) Walks() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.walks
}

// NodeHashes implements refcount.HashSource: the hashes as of etcd's
// revision when it is called (a linearizable read), once the watch has
// delivered every event up to it, or later ones when they have been
// applied by then. It fails at once when the Warm is cold, and when the
// watch has not reached the revision within the Warm's wait or breaks
// meanwhile.
func (w *Warm) NodeHashes(ctx context.Context) (map[string]*synchash.Table, error) {
	ctx, cancel := context.WithTimeout(ctx, w.wait)
	defer cancel()
	resp, err := w.cli.Get(ctx, w.k.identity(), clientv3.WithCountOnly())
	if err != nil {
		return nil, fmt.Errorf("etcdstore: warm hashes: read etcd's revision: %w", err)
	}
	ask := &warmAsk{rev: resp.Header.Revision, reply: make(chan map[string]*synchash.Table, 1)}
	w.mu.Lock()
	if w.byNode == nil {
		err := w.cold
		w.mu.Unlock()
		return nil, fmt.Errorf("etcdstore: warm hashes: cold: %w", err)
	}
	if w.through >= ask.rev {
		h := copyHashes(w.byNode)
		w.mu.Unlock()
		return h, nil
	}
	w.asks = append(w.asks, ask)
	w.mu.Unlock()
	select {
	case w.kick <- struct{}{}:
	default:
	}
	select {
	case h := <-ask.reply:
		if h == nil {
			w.mu.Lock()
			err := w.cold
			w.mu.Unlock()
			return nil, fmt.Errorf("etcdstore: warm hashes: the watch broke before revision %d: %w", ask.rev, err)
		}
		return h, nil
	case <-ctx.Done():
		w.mu.Lock()
		w.asks = deleteAsk(w.asks, ask)
		through := w.through
		w.mu.Unlock()
		return nil, fmt.Errorf("etcdstore: warm hashes: the watch is at revision %d, not %d: %w", through, ask.rev, ctx.Err())
	}
}

func deleteAsk(asks []*warmAsk, a *warmAsk) []*warmAsk {
	for i, x := range asks {
		if x == a {
			return append(asks[:i], asks[i+1:]...)
		}
	}
	return asks
}

func copyHashes(byNode map[string]*synchash.Table) map[string]*synchash.Table {
	out := make(map[string]*synchash.Table, len(byNode))
	for n, t := range byNode {
		c := *t
		out[n] = &c
	}
	return out
}

// run walks and watches, again after each break, until ctx ends.
func (w *Warm) run(ctx context.Context) {
	defer close(w.stopped)
	for ctx.Err() == nil {
		err := w.round(ctx)
		w.goCold(err)
		pause := time.NewTimer(time.Duration(200+rand.IntN(300)) * time.Millisecond)
		select {
		case <-ctx.Done():
		case <-pause.C:
		}
		pause.Stop()
	}
	w.goCold(ctx.Err())
}

// goCold drops the hashes and fails the pending asks.
func (w *Warm) goCold(err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.byNode, w.through, w.cold = nil, 0, err
	for _, a := range w.asks {
		a.reply <- nil
	}
	w.asks = nil
}

// round walks the references, then applies the watch's events until it
// breaks.
func (w *Warm) round(ctx context.Context) error {
	if err := w.checkVersions(ctx); err != nil {
		return err
	}
	byNode, rev, err := w.walk(ctx)
	if err != nil {
		return err
	}
	w.mu.Lock()
	w.walks++
	walks := w.walks
	w.mu.Unlock()
	if w.afterWalk != nil {
		w.afterWalk(walks)
	}
	w.mu.Lock()
	w.byNode, w.through, w.cold = byNode, rev, nil
	w.mu.Unlock()

	// A watcher of its own: its stream holds this watch alone, so that
	// etcd answers a progress request as soon as this watch caught up.
	watcher := clientv3.NewWatcher(w.cli)
	defer watcher.Close()
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	ch := watcher.Watch(wctx, w.k.dir(refsDir), clientv3.WithPrefix(), clientv3.WithRev(rev+1))
	tick := time.NewTicker(progressEvery)
	defer tick.Stop()
	for {
		select {
		case resp, ok := <-ch:
			if !ok {
				return fmt.Errorf("etcdstore: warm hashes: the watch ended: %w", context.Cause(wctx))
			}
			if err := w.apply(resp); err != nil {
				return err
			}
		case <-w.kick:
			_ = watcher.RequestProgress(wctx)
		case <-tick.C:
			w.mu.Lock()
			pending := len(w.asks) > 0
			w.mu.Unlock()
			if pending {
				_ = watcher.RequestProgress(wctx)
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// walk reads every reference key at one revision (again from the start
// if etcd compacted it meanwhile) and returns the hashes and the
// revision.
func (w *Warm) walk(ctx context.Context) (map[string]*synchash.Table, int64, error) {
	for {
		byNode := map[string]*synchash.Table{}
		lastID, b, h := "", 0, uint64(0)
		rev, err := scanRefs(ctx, w.cli, newWindows(w.k, warmPage, nil), w.k.dir(refsDir), 0, func(id, node string) bool {
			if id != lastID {
				lastID = id
				b, h = synchash.Of(id) // once per resource, not per reference
			}
			t := byNode[node]
			if t == nil {
				t = new(synchash.Table)
				byNode[node] = t
			}
			t[b].Count++
			t[b].Hash += h
			return true
		})
		if errors.Is(err, rpctypes.ErrCompacted) {
			continue
		}
		if err != nil {
			return nil, 0, fmt.Errorf("etcdstore: warm hashes: walk: %w", err)
		}
		return byNode, rev, nil
	}
}

// apply applies one watch response: its events, in order, or the
// progress it reports.
func (w *Warm) apply(resp clientv3.WatchResponse) error {
	if resp.CompactRevision != 0 {
		return fmt.Errorf("etcdstore: warm hashes: etcd compacted revision %d away: %w", resp.CompactRevision, rpctypes.ErrCompacted)
	}
	if err := resp.Err(); err != nil {
		return fmt.Errorf("etcdstore: warm hashes: the watch failed: %w", err)
	}
	if resp.Canceled {
		return errors.New("etcdstore: warm hashes: etcd cancelled the watch")
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if resp.IsProgressNotify() {
		// Every event up to the header's revision has been delivered.
		w.advance(resp.Header.Revision)
		return nil
	}
	for _, ev := range resp.Events {
		// The events of one revision come in one response, in order:
		// the hashes are those of revision r-1 before the first event
		// of r.
		w.advance(ev.Kv.ModRevision - 1)
		id, node, ok := splitPair(w.k.trim(refsDir, string(ev.Kv.Key)))
		if !ok {
			return fmt.Errorf("etcdstore: warm hashes: malformed key %q", ev.Kv.Key)
		}
		t := w.byNode[node]
		switch {
		case ev.Type == mvccpb.DELETE:
			if t == nil {
				return fmt.Errorf("etcdstore: warm hashes: %q deleted, but its node has no reference", ev.Kv.Key)
			}
			t.Remove(id)
			if t.Empty() {
				delete(w.byNode, node)
			}
		case ev.Kv.CreateRevision == ev.Kv.ModRevision: // created
			if t == nil {
				t = new(synchash.Table)
				w.byNode[node] = t
			}
			t.Add(id)
		}
	}
	if n := len(resp.Events); n > 0 {
		w.advance(resp.Events[n-1].Kv.ModRevision)
	}
	return nil
}

// advance records that the hashes are those of revision rev (and of
// every one since through: no event came between) and answers the asks
// it satisfies. Callers hold mu.
func (w *Warm) advance(rev int64) {
	if rev <= w.through {
		return
	}
	w.through = rev
	kept := w.asks[:0]
	for _, a := range w.asks {
		if a.rev <= rev {
			a.reply <- copyHashes(w.byNode)
		} else {
			kept = append(kept, a)
		}
	}
	w.asks = kept
}

// checkVersions refuses to keep hashes when an etcd member runs a version
// whose requested progress notifications may run ahead of the events
// (etcd-io/etcd#15220, fixed with #17557 in 3.4.31 and 3.5.13): the
// hashes could then miss a reference. A member that does not answer (one
// of a cluster may be down) is not held against it; one must answer.
func (w *Warm) checkVersions(ctx context.Context) error {
	var errs []error
	for _, ep := range w.cli.Endpoints() {
		sctx, cancel := context.WithTimeout(ctx, w.wait)
		st, err := w.cli.Status(sctx, ep)
		cancel()
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if !progressSafe(st.Version) {
			return fmt.Errorf("etcdstore: warm hashes: etcd at %s runs %s; its progress notifications may run ahead of the events before 3.4.31 and 3.5.13: new leaders walk", ep, st.Version)
		}
	}
	if len(errs) == len(w.cli.Endpoints()) {
		return fmt.Errorf("etcdstore: warm hashes: no etcd member told its version: %w", errors.Join(errs...))
	}
	return nil
}

// progressSafe reports whether etcd version v (major.minor.patch)
// answers a requested progress notification only once its events are
// sent.
func progressSafe(v string) bool {
	var major, minor, patch int
	if _, err := fmt.Sscanf(v, "%d.%d.%d", &major, &minor, &patch); err != nil {
		return false
	}
	switch {
	case major != 3:
		return major > 3
	case minor == 4:
		return patch >= 31
	case minor == 5:
		return patch >= 13
	default:
		return minor > 5
	}
}
