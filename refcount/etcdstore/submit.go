package etcdstore

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sharedcontent/sharedcontent/refcount"
)

// DefaultFlushInterval is how long a submitted batch waits at most, by
// default, for others to share its transaction (Options.FlushInterval).
const DefaultFlushInterval = 5 * time.Millisecond

// submitted is one batch waiting for its transaction.
type submitted struct {
	ctx    context.Context
	groups [][]refcount.Write // a copy: the caller may change its batch
	at     time.Time          // when it was submitted
	urgent bool               // a Commit: flushed without waiting for the interval
	count  *counted           // a counted add (SubmitAddRef), or nil
	// An estimate of its writes and their bytes, to flush once the
	// pending batches fill a transaction.
	ops, bytes int

	done chan struct{} // closed when err is set
	err  error
}

func (b *submitted) finish(err error) {
	b.err = err
	close(b.done)
}

// queue holds the submitted batches not yet taken by the flusher, in
// submission order.
type queue struct {
	mu         sync.Mutex
	items      []*submitted
	ops, bytes int // the items' estimates, summed
	urgent     int // how many items are Commits
	started    bool
	closing    bool
	kick       chan struct{} // capacity 1: something changed
	stopped    chan struct{} // closed when the flusher returned
}

func (q *queue) wake() {
	select {
	case q.kick <- struct{}{}:
	default:
	}
}

// Submit implements refcount.Storage: group commit (docs/design.md
// §7.1). The batch is checked, copied and queued before Submit returns,
// so it is applied after every batch submitted or committed before it and
// before every one after. The flusher folds the pending batches, in that
// order, into one guarded transaction (the overlay that Commit folds one
// batch with: a key written by several is written once, with its last
// value) and commits it once the oldest has waited Options.FlushInterval,
// or once they fill a transaction (Options.MaxTxnOps writes or about
// Options.MaxTxnBytes), or at once when one of them is a Commit. A
// batch's groups never straddle two transactions: a batch that does not
// fit with the others waits for the next, and one larger than a
// transaction is committed alone, as Commit commits it. wait returns once
// the transaction holding the batch committed, or with its error: a
// failed guard fails every batch of that transaction with an error
// wrapping refcount.ErrFenced, and every later one. wait also returns
// when ctx ends first: then, as any etcd request that timed out, the
// batch may still be committed, unless the contexts of every batch of
// its flush had ended before it was sent (then nothing is sent, and the
// batch is not written). Until its transaction committed, reads
// (RefState included) do not see the batch.
func (s *Store) Submit(ctx context.Context, b *refcount.Batch) (wait func() error) {
	return s.submit(ctx, b, false)
}

func (s *Store) submit(ctx context.Context, b *refcount.Batch, urgent bool) (wait func() error) {
	it, err := s.submitItem(ctx, b, urgent, nil)
	if err != nil || it == nil {
		return func() error { return err }
	}
	return it.wait
}

// submitItem checks, copies and queues b, or, with group commit off,
// commits it before it returns; count, if not nil, is b's counted add
// (SubmitAddRef). An empty batch is nil, and no error.
func (s *Store) submitItem(ctx context.Context, b *refcount.Batch, urgent bool, count *counted) (*submitted, error) {
	if err := s.usable(ctx); err != nil {
		return nil, err
	}
	if b.Len() == 0 {
		return nil, nil
	}
	if err := b.Check(); err != nil {
		return nil, err
	}
	if err := s.lost.Load(); err != nil {
		return nil, *err
	}
	it := &submitted{ctx: ctx, groups: copyGroups(b), at: time.Now(), urgent: urgent, count: count, done: make(chan struct{})}
	if s.opts.FlushInterval < 0 {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.flushSome([]*submitted{it})
		return it, nil
	}
	it.ops, it.bytes = s.estimate(it.groups)
	if err := s.enqueue(it); err != nil {
		return nil, err
	}
	return it, nil
}

// wait returns the batch's outcome once its transaction is done, or an
// error wrapping its context's error if that ends first.
func (it *submitted) wait() error {
	select {
	case <-it.done:
	case <-it.ctx.Done():
	}
	select {
	case <-it.done:
		// A flush that failed because every waiter's context ended
		// fails with this waiter's own context error.
		if it.ctx.Err() == nil || !isContextErr(it.err) {
			return it.err
		}
	default:
	}
	return fmt.Errorf("etcdstore: commit: %w", it.ctx.Err())
}

func isContextErr(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}

// copyGroups copies b's groups and the maps and sets their writes hold.
func copyGroups(b *refcount.Batch) [][]refcount.Write {
	groups := b.Groups()
	out := make([][]refcount.Write, len(groups))
	for i, g := range groups {
		out[i] = slices.Clone(g)
		for j := range out[i] {
			op := &out[i][j]
			op.NodeRefs = maps.Clone(op.NodeRefs)
			if op.Buckets != nil {
				bs := *op.Buckets
				op.Buckets = &bs
			}
		}
	}
	return out
}

// estimate returns about how many writes and bytes groups make: exactly
// for references, meta and deletes, a guess for the writes that depend on
// what is stored (DropRefs, ReplaceNode) and for JSON values.
func (s *Store) estimate(groups [][]refcount.Write) (ops, bytes int) {
	refBytes := func(res, node string) int {
		return len(s.k.ref(res, node)) + len(s.k.index(node, res))
	}
	for _, g := range groups {
		for i := range g {
			op := &g[i]
			switch op.Kind {
			case refcount.WriteAddRef, refcount.WriteRemoveRef:
				ops, bytes = ops+2, bytes+refBytes(op.Key, op.Node)
			case refcount.WriteReplaceNode:
				for res := range op.NodeRefs {
					ops, bytes = ops+2, bytes+refBytes(res, op.Node)
				}
				ops++
			default:
				ops, bytes = ops+1, bytes+len(s.k.meta(op.Key))+len(op.String)+64
			}
		}
	}
	return ops, bytes
}

// enqueue queues it and starts the flusher if it is not running.
func (s *Store) enqueue(it *submitted) error {
	q := &s.q
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closing {
		return errClosed
	}
	if !q.started {
		q.started = true
		go s.flusher()
	}
	q.items = append(q.items, it)
	q.ops += it.ops
	q.bytes += it.bytes
	if it.urgent {
		q.urgent++
	}
	// Wake the flusher when this changes what it waits for: the first
	// batch starts the interval; a Commit or a full transaction ends it.
	if len(q.items) == 1 || it.urgent || q.ops >= s.opts.MaxTxnOps || q.bytes >= s.opts.MaxTxnBytes {
		q.wake()
	}
	return nil
}

// take removes the pending batches that fill about one transaction (at
// least one) and returns them. A transaction also reads the size of each
// set its counted adds count (SubmitAddRef): one op each.
func (q *queue) take(maxOps, maxBytes int) []*submitted {
	q.mu.Lock()
	defer q.mu.Unlock()
	n, ops, reads, bytes := 0, 0, 0, 0
	var sets []string
	for _, it := range q.items {
		read := 0
		if c := it.count; c != nil && !slices.Contains(sets, c.res) {
			read = 1
		}
		if n > 0 && (ops+reads+read+it.ops > maxOps || bytes+it.bytes > maxBytes) {
			break
		}
		if read > 0 {
			sets = append(sets, it.count.res)
		}
		n, ops, reads, bytes = n+1, ops+it.ops, reads+read, bytes+it.bytes
	}
	out := slices.Clone(q.items[:n])
	q.items = slices.Delete(q.items, 0, n)
	q.ops -= ops
	q.bytes -= bytes
	for _, it := range out {
		if it.urgent {
			q.urgent--
		}
	}
	return out
}

// flusher commits the pending batches: when the oldest has waited
// FlushInterval, when they fill a transaction, or at once for a Commit.
// After Close it commits what is pending and returns.
func (s *Store) flusher() {
	q := &s.q
	defer close(q.stopped)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		q.mu.Lock()
		n, closing := len(q.items), q.closing
		var wait time.Duration
		if n > 0 && !closing && q.urgent == 0 && q.ops < s.opts.MaxTxnOps && q.bytes < s.opts.MaxTxnBytes {
			wait = time.Until(q.items[0].at.Add(s.opts.FlushInterval))
		}
		q.mu.Unlock()
		switch {
		case n == 0 && closing:
			return
		case n == 0:
			<-q.kick
			continue
		case wait > 0:
			timer.Reset(wait)
			select {
			case <-timer.C:
			case <-q.kick:
				timer.Stop()
			}
			continue
		}
		s.flush(q.take(s.opts.MaxTxnOps, s.opts.MaxTxnBytes))
	}
}

// flush commits items, in order, in as few transactions as their groups
// allow, each holding whole batches.
func (s *Store) flush(items []*submitted) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for len(items) > 0 {
		items = items[s.flushSome(items):]
	}
}

// flushSome commits the longest prefix of items that fits one
// transaction (or the first alone, as Commit does, when it does not fit
// one) and returns its length. Callers hold mu.
func (s *Store) flushSome(items []*submitted) int {
	if err := s.lost.Load(); err != nil {
		for _, it := range items {
			it.finish(*err)
		}
		return len(items)
	}
	// release stops watching the waiters' contexts before any waiter is
	// let go: the store never touches a caller's context after its
	// Submit's wait or its Commit returned (a coordinator passes a
	// fasthttp RequestCtx, which is reused once its handler returns).
	ctx, release := whileAnyWaits(items)
	if ctx.Err() != nil { // no one waits any more: nothing is sent
		errs := make([]error, len(items))
		for i, it := range items {
			errs[i] = fmt.Errorf("etcdstore: commit: abandoned: %w", it.ctx.Err())
		}
		release()
		for i, it := range items {
			it.finish(errs[i])
		}
		return len(items)
	}
	t, n := s.planFit(ctx, items)
	if n == 0 {
		err := s.commitAlone(ctx, items[0].groups)
		if err == nil {
			err = s.countAlone(ctx, items[0])
		}
		release()
		items[0].finish(err)
		return 1
	}
	// The transaction counts the counted adds' sets after its writes
	// (planFit left room for the reads).
	sets := countedSets(items[:n])
	ops := s.withCounts(t.ops, items[:n], sets)
	resp, err := s.guarded(ctx, ops, len(sets))
	if err == nil {
		s.readCounts(resp, ops, items[:n], sets)
	}
	release()
	for _, it := range items[:n] {
		it.finish(err)
	}
	return n
}

// planFit folds the longest prefix of items whose writes fit one
// transaction and returns that transaction and the prefix's length (0:
// the first does not fit alone, or its reads failed). The transaction
// leaves room for the reads of its counted adds' sets.
func (s *Store) planFit(ctx context.Context, items []*submitted) (txn, int) {
	fits := func(p *plan, items []*submitted) (txn, bool) {
		txns, err := p.pack(s.opts.MaxTxnOps-len(countedSets(items)), s.opts.MaxTxnBytes)
		if err != nil || len(txns) != 1 {
			return txn{}, false
		}
		return txns[0], true
	}
	// Most often they all fit (take took about one transaction's worth):
	// one plan, one packing.
	p := newPlan(ctx, s)
	n := 0
	for _, it := range items {
		if p.batch(it.groups) != nil {
			break
		}
		n++
	}
	if n == len(items) {
		if t, ok := fits(p, items); ok {
			return t, n
		}
	}
	// Else one batch after the other on a new overlay, packed after
	// each: the last packing that fit is the transaction (a batch that
	// did not fit, or whose reads failed, changed the overlay after it).
	p = newPlan(ctx, s)
	var last txn
	for n = 0; n < len(items); n++ {
		if p.batch(items[n].groups) != nil {
			break
		}
		t, ok := fits(p, items[:n+1])
		if !ok {
			break
		}
		last = t
	}
	return last, n
}

// batch applies every group of one batch.
func (p *plan) batch(groups [][]refcount.Write) error {
	for _, g := range groups {
		if err := p.group(g); err != nil {
			return err
		}
	}
	return nil
}

// whileAnyWaits returns a context that ends when every item's context
// has ended: a transaction is abandoned only when no one waits for it.
func whileAnyWaits(items []*submitted) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(context.Background())
	var left atomic.Int64
	left.Store(int64(len(items)))
	leave := func() {
		if left.Add(-1) == 0 {
			cancel()
		}
	}
	// Each waiter's Done channel is watched by a goroutine of its own,
	// not context.AfterFunc: for a context that is no cancelCtx of the
	// standard library (a fasthttp RequestCtx) AfterFunc's goroutine asks
	// the context for its cause when Done closes (context.Cause calls
	// Value), and it may still run after stop returned, when the handler
	// has returned and fasthttp reuses the RequestCtx: a data race the
	// race detector reported at a coordinator's shutdown. A Done channel
	// read outlives nothing (fasthttp's is the server's).
	stopped := make(chan struct{})
	for _, it := range items {
		if it.ctx.Err() != nil {
			leave() // now: the Txn is not sent
			continue
		}
		done := it.ctx.Done()
		go func() {
			select {
			case <-done:
				leave()
			case <-stopped:
			}
		}()
	}
	return ctx, func() {
		close(stopped)
		cancel()
	}
}
