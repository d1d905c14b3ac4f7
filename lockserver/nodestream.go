package lockserver

import (
	"fmt"
	"sync"
	"time"

	"github.com/sharedcontent/sharedcontent/lockserver/api"
)

// NodeStreamBuffer bounds the events waiting to be written on one node's
// stream. A stream that falls this far behind is ended; its node finds its
// requests' outcomes with /lock/status and opens a new one
// (docs/design.md §10.1).
const NodeStreamBuffer = 4096

// NodeStream is one node's event stream (GET /lock/events): it carries
// the outcome (granted with the lease, completed, or error) of each queued
// request of the node that has no stream of its own (/lock/subscribe). A
// node has at most one: a newer stream ends the older.
//
// Events are queued without blocking the Coordinator; Ready is signalled
// when some wait, and Take takes them.
type NodeStream struct {
	locks *locks
	node  string
	ready chan struct{} // one slot: events were queued or the stream ended

	mu     sync.Mutex  // taken after nodeStreams.mu, never before
	events []api.Event // protected by mu
	ended  bool        // protected by mu
}

// Node is the node the stream belongs to.
func (s *NodeStream) Node() string { return s.node }

// Ready is signalled when events are waiting or the stream has ended.
func (s *NodeStream) Ready() <-chan struct{} { return s.ready }

// Take appends the waiting events to dst. It returns false once the stream
// has ended: the events returned with it are its last.
func (s *NodeStream) Take(dst []api.Event) ([]api.Event, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	dst = append(dst, s.events...)
	clear(s.events)
	s.events = s.events[:0]
	return dst, !s.ended
}

// push queues ev, or ends a stream that has fallen NodeStreamBuffer
// events behind. It reports whether ev was queued.
func (s *NodeStream) push(ev api.Event) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended {
		return false
	}
	if len(s.events) >= NodeStreamBuffer {
		s.endLocked()
		return false
	}
	s.events = append(s.events, ev)
	s.signal()
	return true
}

// end ends the stream: the events already queued are still taken.
func (s *NodeStream) end() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.endLocked()
}

func (s *NodeStream) endLocked() {
	if !s.ended {
		s.ended = true
		s.signal()
	}
}

func (s *NodeStream) signal() {
	select {
	case s.ready <- struct{}{}:
	default:
	}
}

// Close ends the stream. The node's queued requests keep their place for
// a lease TTL, as a polling waiter's do, so that the node can open a new
// stream (or poll) without losing its turn; a grant made meanwhile waits
// for its claim (/lock/status) until the claim timeout.
func (s *NodeStream) Close() {
	s.locks.streams.remove(s, s.locks.now())
	s.end()
}

// Claimed records that the grant with leaseID of (typ, resourceID) has
// reached its holder (it was written on the stream), so the claim timeout
// does not apply.
func (s *NodeStream) Claimed(typ api.OperationType, resourceID, leaseID string) {
	s.locks.claim(typ, resourceID, leaseID)
}

// claim marks the grant leaseID of (typ, resourceID) claimed.
func (lk *locks) claim(typ api.OperationType, resourceID, leaseID string) {
	t, err := validateKey(typ, resourceID)
	if err != nil {
		return
	}
	sh := lk.shardFor(resourceID)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if r := sh.resources[resourceID]; r != nil {
		if g := r.keys[t].holder; g != nil && g.leaseID == leaseID {
			g.claimed = true
		}
	}
}

// OpenNodeStream opens the event stream of node, ending the node's older
// one if any. The caller must Close it.
func (lk *locks) OpenNodeStream(node string) (*NodeStream, error) {
	if node == "" {
		return nil, fmt.Errorf("node_id is required: %w", api.ErrInvalidArgument)
	}
	if err := validateID("node_id", node); err != nil {
		return nil, err
	}
	s := &NodeStream{locks: lk, node: node, ready: make(chan struct{}, 1)}
	select {
	case <-lk.stop:
		s.end()
		return s, nil
	default:
	}
	lk.streams.add(s)
	return s, nil
}

// tell delivers a queued request's outcome: on its own stream if it has
// one, else on its node's stream if that is open. Without either, the
// node finds the outcome with /lock/status (a grant waits for that claim).
// Called with the shard mutex held.
func (n *nodeStreams) tell(w *waiter, ev api.Event) {
	if w.sub != nil {
		w.sub.finish(ev)
		return
	}
	n.send(w.nodeID, ev)
}

// listens reports whether anyone is told of w's outcome as it happens.
// Called with the shard mutex held.
func (n *nodeStreams) listens(w *waiter) bool {
	return w.sub != nil || n.isOpen(w.nodeID)
}

// nodeStreams is the Coordinator's registry of node streams, taken under a
// shard's mutex, never before.
type nodeStreams struct {
	ttl time.Duration    // Config.LeaseTTL
	now func() time.Time // the Coordinator's clock

	mu   sync.Mutex
	open map[string]*NodeStream // by node; protected by mu
	// left is when a node's last stream ended: its stream-less waiters
	// keep their place for ttl after (sweep.go). Protected by mu.
	left    map[string]time.Time
	pruneAt int // prune left when it reaches this size; protected by mu
}

func newNodeStreams(ttl time.Duration, now func() time.Time) *nodeStreams {
	return &nodeStreams{ttl: ttl, now: now, open: map[string]*NodeStream{}, left: map[string]time.Time{}, pruneAt: 64}
}

// count is the number of node streams open now.
func (n *nodeStreams) count() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return len(n.open)
}

func (n *nodeStreams) add(s *NodeStream) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if old := n.open[s.node]; old != nil {
		old.end() // a newer stream replaces an older one
	}
	n.open[s.node] = s
	delete(n.left, s.node)
}

// remove unregisters s (if it is still its node's stream).
func (n *nodeStreams) remove(s *NodeStream, now time.Time) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.removeLocked(s, now)
}

func (n *nodeStreams) removeLocked(s *NodeStream, now time.Time) {
	if n.open[s.node] != s {
		return
	}
	delete(n.open, s.node)
	n.left[s.node] = now
	if len(n.left) >= n.pruneAt {
		for node, at := range n.left {
			if now.Sub(at) > n.ttl {
				delete(n.left, node)
			}
		}
		n.pruneAt = max(64, 2*len(n.left))
	}
}

// send queues ev on node's stream, if it has one open.
func (n *nodeStreams) send(node string, ev api.Event) {
	n.mu.Lock()
	defer n.mu.Unlock()
	s := n.open[node]
	if s != nil && !s.push(ev) {
		n.removeLocked(s, n.now())
	}
}

func (n *nodeStreams) isOpen(node string) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.open[node] != nil
}

// keeps reports whether node's stream-less waiters keep their place
// without polling: its stream is open, or ended less than a lease TTL ago.
func (n *nodeStreams) keeps(node string, now time.Time) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.open[node] != nil {
		return true
	}
	at, ok := n.left[node]
	return ok && now.Sub(at) <= n.ttl
}

// closeAll ends every node stream (Coordinator.Close).
func (n *nodeStreams) closeAll() {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, s := range n.open {
		s.end()
	}
	clear(n.open)
}
