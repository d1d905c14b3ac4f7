package lockserver

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/sharedcontent/sharedcontent/refcount"
)

// First syncs in bulk (docs/design.md §10.9). A first sync (the adds of
// a journal generation the coordinator has not had a full sync from: a
// new node, a wiped or adopted coordinator) touches a page of each
// reference set it adds to, and bbolt copies each touched page once per
// transaction: a fleet's first syncs, each its own transaction, rewrite
// the same pages once per node. So their writes share transactions:
//   - the first write to arrive opens a shared transaction and waits up
//     to FirstSyncWindow for company, or until the transaction holds
//     FirstSyncRefs references (a bigger write goes alone); a write
//     that ends alone in its transaction is written as any sync's, in
//     slices (commitSlices);
//   - a write that arrives meanwhile joins it, and one that arrives while
//     a shared transaction commits joins the next, which commits once the
//     one before is done (a shared commit at a time: the transaction
//     holds every refcount stripe anyway);
//   - the transaction commits through the syncs' commit, the writes in
//     their order of arrival, each node's references before its member
//     record (applySync's order, so any prefix a store that commits in
//     groups lands is safe);
//   - its outcome goes to every write it holds: a failed one fails each
//     node's sync (named in its own error), each node stays unsynced and
//     syncs again at its next session.
// A write waiting for its transaction holds no sync slot (write first
// calls the release it is given, syncWrite.releaseSlot): waiting costs
// no CPU, and the nodes' chunks need the slots to reach their done. What the waiting writes hold is their
// syncs' buffers, which MaxSyncBuffer bounds cluster-wide, and the
// shared transactions: at most two at once, the one being committed and
// the one being filled. A write that does not fit in the one being
// filled waits, with no batch of its own yet (its writes are made
// straight into the transaction it joins, fill), until that one starts
// its commit, and then opens the next: a fleet's first syncs no longer
// pile up a shared batch (~50 MB at 100,000 references) per
// transaction waiting for its turn.

const (
	// DefaultFirstSyncWindow is how long a first sync's write waits for
	// others to share its transaction.
	DefaultFirstSyncWindow = 100 * time.Millisecond
	// DefaultFirstSyncRefs bounds the references of one shared
	// transaction (10 first syncs of 10,000): a shutdown waits for the
	// one being committed.
	DefaultFirstSyncRefs = 100_000
)

// syncShare gathers first syncs' writes into shared transactions.
type syncShare struct {
	// commit writes a shared transaction whole; alone writes one write
	// bigger than maxRefs in slices (syncs.commitSlices).
	commit  func(context.Context, *refcount.Batch) error
	alone   func(ctx context.Context, node string, b *refcount.Batch) error
	window  time.Duration
	maxRefs int
	// committing is held by the shared transaction being committed.
	committing sync.Mutex

	mu   sync.Mutex
	open *sharedTx // the transaction being filled; protected by mu
	// joined, when set (by tests), is called with the node and the
	// transaction's write count each time a write joins it, under mu;
	// waited, with the node, each time a write waits for the open
	// transaction to start its commit.
	joined func(node string, writes int)
	waited func(node string)
}

// sharedTx is one shared transaction.
type sharedTx struct {
	node   string // whose write opened it
	b      *refcount.Batch
	refs   int
	writes int
	opened time.Time
	full   chan struct{} // closed when it holds maxRefs references
	closed chan struct{} // closed when its commit starts: no write joins it any more
	done   chan struct{} // closed once committed; err is then set
	err    error
	// committed is when its commit ended (for the tests' rule).
	committed time.Time
}

func newSyncShare(cfg Config, commit func(context.Context, *refcount.Batch) error,
	alone func(context.Context, string, *refcount.Batch) error) *syncShare {
	return &syncShare{commit: commit, alone: alone, window: cfg.FirstSyncWindow, maxRefs: cfg.FirstSyncRefs}
}

// write commits node's first sync of refs references, whose writes fill
// appends to a batch, in a shared transaction, and returns its outcome;
// wait is called first (the caller gives back its sync slot). Once its
// writes have joined a transaction, it returns when the transaction is
// committed, whatever ctx does meanwhile: the others' writes are in it
// too. Before that, an ended ctx stops it with nothing written.
func (sh *syncShare) write(ctx context.Context, node string, refs int, fill func(*refcount.Batch), wait func()) (*sharedTx, error) {
	wait()
	tx, leader, err := sh.join(ctx, node, refs, fill)
	if err != nil {
		return nil, err
	}
	if leader {
		sh.lead(ctx, tx)
	}
	<-tx.done
	switch {
	case tx.err == nil:
	case tx.writes == 1:
		return tx, fmt.Errorf("first sync of node %s: %w", node, tx.err)
	default:
		return tx, fmt.Errorf("first sync of node %s, in a transaction shared by %d nodes' syncs: %w", node, tx.writes, tx.err)
	}
	return tx, nil
}

// join appends node's writes (fill) to the open transaction, opening one
// if there is none. When they do not fit in it, it waits until that one
// starts its commit and opens the next (it goes alone if it alone does
// not fit); an ended ctx stops the wait. leader reports that the caller
// opened the transaction and must commit it.
func (sh *syncShare) join(ctx context.Context, node string, refs int, fill func(*refcount.Batch)) (tx *sharedTx, leader bool, err error) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	for sh.open != nil && sh.open.refs+refs > sh.maxRefs {
		open := sh.open
		closeOnce(open.full)
		if sh.waited != nil {
			sh.waited(node)
		}
		sh.mu.Unlock()
		select {
		case <-open.closed:
		case <-ctx.Done():
		}
		sh.mu.Lock()
		if ctx.Err() != nil {
			return nil, false, fmt.Errorf("first sync of node %s: waiting for room in a shared transaction: %w", node, ctx.Err())
		}
	}
	tx = sh.open
	if tx == nil {
		tx = &sharedTx{node: node, b: new(refcount.Batch), opened: time.Now(),
			full: make(chan struct{}), closed: make(chan struct{}), done: make(chan struct{})}
		sh.open, leader = tx, true
	}
	tx.b.Break()
	fill(tx.b)
	tx.b.Break()
	tx.refs += refs
	tx.writes++
	if tx.refs >= sh.maxRefs {
		closeOnce(tx.full)
	}
	if sh.joined != nil {
		sh.joined(node, tx.writes)
	}
	return tx, leader, nil
}

// lead waits for tx's window (or until it is full, or ctx ends), then for
// the shared transaction before it, closes tx to new writes and commits
// it.
func (sh *syncShare) lead(ctx context.Context, tx *sharedTx) {
	t := time.NewTimer(sh.window)
	select {
	case <-t.C:
	case <-tx.full:
	case <-ctx.Done():
	}
	t.Stop()
	sh.committing.Lock()
	defer sh.committing.Unlock()
	sh.mu.Lock()
	if sh.open == tx {
		sh.open = nil
	}
	close(tx.closed)
	sh.mu.Unlock()
	if tx.writes == 1 {
		// Alone (none came, or it is bigger than a shared transaction):
		// as any sync's write, in slices, stopped by the end of its
		// request (a shutdown).
		tx.err = sh.alone(ctx, tx.node, tx.b)
	} else {
		// The others' writes are in tx: it commits even if the
		// leader's request is cancelled meanwhile.
		tx.err = sh.commit(context.WithoutCancel(ctx), tx.b)
	}
	tx.committed = time.Now()
	close(tx.done)
}

// closeOnce closes ch unless it is closed already. Callers hold mu.
func closeOnce(ch chan struct{}) {
	select {
	case <-ch:
	default:
		close(ch)
	}
}
