package lockserver

// waitQueue is one key's FIFO queue of waiters. Every operation a request
// can trigger is O(1) or O(log n) in the queue's length, so that a key
// with a hundred thousand waiters costs each newcomer no more than an
// empty one (docs/design.md §10.3: a linear scan per /lock made enqueueing O(n²)):
//
//   - lookup by request ID: a map;
//   - removal anywhere (cancel, a closed stream, an abandoned poller):
//     the slot is emptied and skipped later;
//   - a waiter's position (1 + the waiters ahead of it): a Fenwick tree
//     over the slots, counting the occupied ones.
//
// Slots before head are all empty. The slice is compacted, and the tree
// rebuilt, when empty slots outnumber the waiters, so space stays O(n)
// and the rebuilds cost O(1) amortised per removal.
type waitQueue struct {
	slots []*waiter              // in arrival order; nil: removed
	tree  []int32                // Fenwick tree over slots (1-based): occupied counts
	head  int                    // slots[:head] are all nil
	byID  map[requestKey]*waiter // occupied slots by (node, request ID)
}

// minCompact is the number of empty slots below which the queue is never
// compacted: small queues just shift.
const minCompact = 64

// Len returns the number of waiters.
func (q *waitQueue) Len() int { return len(q.byID) }

// Get returns the waiter of the request (node, requestID), or nil.
func (q *waitQueue) Get(node, requestID string) *waiter { return q.byID[requestKey{node, requestID}] }

// Push appends w at the tail. Its request must not be queued already.
func (q *waitQueue) Push(w *waiter) {
	if q.byID == nil {
		q.byID = make(map[requestKey]*waiter)
	}
	w.slot = len(q.slots)
	q.slots = append(q.slots, w)
	q.byID[w.key()] = w
	// Appending to a Fenwick tree: node i covers (i-lowbit(i), i].
	i := len(q.slots)
	q.tree = append(q.tree, 1+q.prefix(i-1)-q.prefix(i-i&-i))
}

// Front returns the waiter at the head, or nil.
func (q *waitQueue) Front() *waiter {
	for q.head < len(q.slots) && q.slots[q.head] == nil {
		q.head++
	}
	if q.head == len(q.slots) {
		return nil
	}
	return q.slots[q.head]
}

// Position returns w's place in the queue, 1 for the head.
func (q *waitQueue) Position(w *waiter) int { return int(q.prefix(w.slot + 1)) }

// Remove takes w out of the queue.
func (q *waitQueue) Remove(w *waiter) {
	if q.byID[w.key()] != w {
		return
	}
	delete(q.byID, w.key())
	q.slots[w.slot] = nil
	for i := w.slot + 1; i <= len(q.tree); i += i & -i {
		q.tree[i-1]--
	}
	if empty := len(q.slots) - len(q.byID); empty >= minCompact && empty > len(q.byID) {
		q.compact()
	}
}

// Each calls fn on every waiter, head first, until fn returns false. fn
// must not change the queue.
func (q *waitQueue) Each(fn func(*waiter) bool) {
	for i := q.head; i < len(q.slots); i++ {
		if w := q.slots[i]; w != nil && !fn(w) {
			return
		}
	}
}

// Head returns up to n waiters from the head.
func (q *waitQueue) Head(n int) []*waiter {
	out := make([]*waiter, 0, min(n, q.Len()))
	q.Each(func(w *waiter) bool {
		out = append(out, w)
		return len(out) < n
	})
	return out
}

// Clear removes every waiter.
func (q *waitQueue) Clear() { *q = waitQueue{} }

// prefix returns how many of slots[:i] are occupied.
func (q *waitQueue) prefix(i int) int32 {
	var n int32
	for ; i > 0; i -= i & -i {
		n += q.tree[i-1]
	}
	return n
}

// compact drops the empty slots and rebuilds the tree, in O(n).
func (q *waitQueue) compact() {
	live := q.slots[:0]
	for _, w := range q.slots[q.head:] {
		if w != nil {
			w.slot = len(live)
			live = append(live, w)
		}
	}
	clear(q.slots[len(live):])
	q.slots, q.head = live, 0
	q.tree = q.tree[:len(live)]
	for i := range q.tree {
		q.tree[i] = 1
	}
	for i := 1; i <= len(q.tree); i++ {
		if j := i + i&-i; j <= len(q.tree) {
			q.tree[j-1] += q.tree[i-1]
		}
	}
}
