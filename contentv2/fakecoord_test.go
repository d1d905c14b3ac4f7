package contentv2

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/containerd/errdefs"
	"github.com/opencontainers/go-digest"
)

// fakeCluster is an in-memory coordinator for the store's unit tests: one
// lock per resource (of any type), a FIFO of waiters, reference sets,
// sessions and members. Each node sees it through node(id), a
// Coordinator. It follows the rules the store relies on, simply:
//   - a lock held is ErrLocked, or a place in the queue (Wait); a waiting
//     pull is answered ErrSkipped when the holder's pull succeeds, and
//     handed the lock when it fails;
//   - a pull of a resource whose last pull succeeded is ErrSkipped; a
//     pull's success adds its holder's reference;
//   - a delete drops the requester's reference (unless it reaps), then is
//     ErrInUse while another node references the resource, ErrUnsynced
//     while a member is not synced; a reap delete needs the reap lock;
//   - a reference is ErrDeleting while a delete is held;
//   - a node is synced once it has synced in its current session.
//
// down makes every call fail as an unreachable coordinator does; refuse
// lets a test refuse chosen calls. Every call is recorded in calls.
type fakeCluster struct {
	id      string
	ttl     time.Duration
	started time.Time

	mu      sync.Mutex
	epoch   uint64                     // protected by mu; 0 answers 1
	down    bool                       // protected by mu
	locks   map[string]*fakeLock       // protected by mu; by resource
	queues  map[string][]*fakeWaiter   // protected by mu; by resource
	pulled  map[string]bool            // protected by mu; the resource's last pull succeeded
	refs    map[string]map[string]bool // protected by mu; resource → nodes
	members map[string]*fakeMember     // protected by mu; by node
	// expiry and absent make up Members' answer: the node expiry, and
	// how long each non-live member has been absent.
	expiry  time.Duration            // protected by mu
	absent  map[string]time.Duration // protected by mu
	expired []string                 // protected by mu; members expired, in order
	fence   uint64                   // protected by mu; the last fence granted
	// completed is each resource's retained delete completion: set by a
	// delete's unlock(success), ended by a pull's success or a reference.
	completed map[string]DeleteCompletion // protected by mu
	// refuse, when set, is asked before each call is served: a non-nil
	// error is the call's answer.
	refuse func(c fakeCall) error // protected by mu
	log    []fakeCall             // protected by mu
	// changed is closed, and replaced, at every call served. Protected
	// by mu.
	changed chan struct{}
}

// fakeCall is one call a node made.
type fakeCall struct {
	Node, Method string
	// At is when the coordinator received it.
	At time.Time
	// Session: the request; Resource and Op: a lock's or a reference's.
	Session  SessionRequest
	Resource string
	Op       Op
	Reap     ReapMode
	// Answer: a session's answer; AnsweredAt when it was given.
	Answer     SessionInfo
	AnsweredAt time.Time
	// Success: an unlock's outcome.
	Success bool
	// WithReapLock: a reap delete granted while the node held the reap
	// lock.
	WithReapLock bool
	// Sync: the references a sync delivered.
	Sync []digest.Digest
	Err  error
}

type fakeMember struct {
	instance string
	synced   bool
	// fresh: made by a session and not synced since; every session
	// answer says NewMember until it syncs.
	fresh bool
	// live is false once a test ends its session (the member stays).
	live bool
}

// fakeLock is a held lock.
type fakeLock struct {
	c        *fakeCluster
	node     string
	op       Op
	resource string
	reap     ReapMode
	fence    uint64
	// withReapLock: the node held the reap lock when this reap delete
	// was granted.
	withReapLock bool
}

type fakeWaiter struct {
	node string
	op   Op
	// answer receives the lock or the error once the holder is done.
	answer chan fakeAnswer
}

type fakeAnswer struct {
	lk  *fakeLock
	err error
}

var errFakeDown = fmt.Errorf("fake coordinator: connection refused: %w", errdefs.ErrUnavailable)

func newFakeCluster(ttl time.Duration) *fakeCluster {
	return &fakeCluster{id: "fake-cluster", ttl: ttl, started: time.Now(), locks: map[string]*fakeLock{},
		queues: map[string][]*fakeWaiter{}, pulled: map[string]bool{}, refs: map[string]map[string]bool{},
		members: map[string]*fakeMember{}, absent: map[string]time.Duration{}, completed: map[string]DeleteCompletion{},
		changed: make(chan struct{})}
}

// node is the coordinator as node id reaches it.
func (c *fakeCluster) node(id string) Coordinator { return &fakeNode{c: c, id: id} }

func (c *fakeCluster) setDown(down bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.down = down
}

func (c *fakeCluster) setRefuse(f func(fakeCall) error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.refuse = f
}

// recorded returns the calls recorded so far.
func (c *fakeCluster) recorded() []fakeCall {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.log)
}

// nodesOf returns the nodes that reference resource, sorted.
func (c *fakeCluster) nodesOf(resource string) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Sorted(maps.Keys(c.refs[resource]))
}

func (c *fakeCluster) addRef(resource, node string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.addRefLocked(resource, node)
}

func (c *fakeCluster) addRefLocked(resource, node string) {
	if c.refs[resource] == nil {
		c.refs[resource] = map[string]bool{}
	}
	c.refs[resource][node] = true
}

// waiting returns how many wait in resource's queue.
func (c *fakeCluster) waiting(resource string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.queues[resource])
}

// begin records a call and says whether it may be served: the answer is
// the refusal otherwise. Callers hold mu.
func (c *fakeCluster) begin(call *fakeCall) error {
	call.At = time.Now()
	switch {
	case c.down:
		call.Err = errFakeDown
	case c.refuse != nil:
		call.Err = c.refuse(*call)
	}
	return call.Err
}

// end records a served call. Callers hold mu.
func (c *fakeCluster) end(call fakeCall, err error) {
	if call.Err == nil {
		call.Err = err
	}
	call.AnsweredAt = time.Now()
	c.log = append(c.log, call)
	c.notifyLocked()
}

// notifyLocked wakes await. Callers hold mu.
func (c *fakeCluster) notifyLocked() {
	close(c.changed)
	c.changed = make(chan struct{})
}

// awaitTimeout bounds await: it only ends a test that would otherwise
// hang; no outcome depends on it.
const awaitTimeout = time.Minute

// await waits until the calls recorded satisfy cond, and returns them.
func (c *fakeCluster) await(t testing.TB, what string, cond func(log []fakeCall) bool) []fakeCall {
	t.Helper()
	deadline := time.After(awaitTimeout)
	for {
		c.mu.Lock()
		log, changed := slices.Clone(c.log), c.changed
		c.mu.Unlock()
		if cond(log) {
			return log
		}
		select {
		case <-changed:
		case <-deadline:
			t.Fatalf("waited %v for %s; calls: %v", awaitTimeout, what, log)
		}
	}
}

// fakeNode is one node's Coordinator of a fakeCluster.
type fakeNode struct {
	c  *fakeCluster
	id string
}

func (n *fakeNode) Session(_ context.Context, req SessionRequest) (info SessionInfo, err error) {
	c := n.c
	c.mu.Lock()
	defer c.mu.Unlock()
	call := fakeCall{Node: n.id, Method: "Session", Session: req}
	defer func() { c.end(call, err) }()
	if err := c.begin(&call); err != nil {
		return SessionInfo{}, err
	}
	if req.ClusterID != "" && req.ClusterID != c.id {
		return SessionInfo{}, fmt.Errorf("cluster %s asked, this is %s: %w", req.ClusterID, c.id, ErrWrongCluster)
	}
	m, known := c.members[n.id]
	if !known {
		m = &fakeMember{fresh: true}
		c.members[n.id] = m
	}
	if m.live && m.instance != req.InstanceID {
		return SessionInfo{}, fmt.Errorf("node %s: %w", n.id, ErrDuplicateNode)
	}
	if req.Echo == nil || !m.live {
		m.synced = false
	}
	m.instance, m.live = req.InstanceID, true
	call.Answer = SessionInfo{ClusterID: c.id, Epoch: max(c.epoch, 1), TTL: c.ttl, Synced: m.synced, Stamp: time.Since(c.started), NewMember: m.fresh}
	return call.Answer, nil
}

// unsync makes node unsynced, as a coordinator restart does: its next
// session answer asks for its journal.
func (c *fakeCluster) unsync(node string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.members[node].synced = false
}

// restart moves the coordinator to a new epoch, every member unsynced.
func (c *fakeCluster) restart() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.epoch = max(c.epoch, 1) + 1
	for _, m := range c.members {
		m.synced = false
	}
}

func (n *fakeNode) EndSession(_ context.Context, instanceID string) (ended bool, err error) {
	c := n.c
	c.mu.Lock()
	defer c.mu.Unlock()
	call := fakeCall{Node: n.id, Method: "EndSession"}
	defer func() { c.end(call, err) }()
	if err := c.begin(&call); err != nil {
		return false, err
	}
	m := c.members[n.id]
	if m == nil || !m.live || m.instance != instanceID {
		return false, nil
	}
	m.live, m.synced = false, false
	return true, nil
}

func (n *fakeNode) SyncRefs(_ context.Context, req SyncRequest) (err error) {
	c := n.c
	c.mu.Lock()
	call := fakeCall{Node: n.id, Method: "SyncRefs"}
	if err := c.begin(&call); err != nil {
		c.end(call, nil)
		c.mu.Unlock()
		return err
	}
	c.mu.Unlock()
	refs, err := req.Snapshot()
	if err == nil && req.Echo() == nil {
		err = fmt.Errorf("fake sync: no echo: %w", ErrLate)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	call.Sync = refs
	defer func() { c.end(call, err) }()
	if err != nil {
		return err
	}
	for resource, nodes := range c.refs {
		delete(nodes, n.id)
		if len(nodes) == 0 {
			delete(c.refs, resource)
		}
	}
	for _, d := range refs {
		c.addRefLocked(d.String(), n.id)
	}
	if m := c.members[n.id]; m != nil && m.live {
		m.synced, m.fresh = true, false
	}
	return nil
}

func (n *fakeNode) AddRef(_ context.Context, dgst digest.Digest, _ bool) (err error) {
	c := n.c
	c.mu.Lock()
	defer c.mu.Unlock()
	call := fakeCall{Node: n.id, Method: "AddRef", Resource: dgst.String()}
	defer func() { c.end(call, err) }()
	if err := c.begin(&call); err != nil {
		return err
	}
	if l := c.locks[dgst.String()]; l != nil && l.op == OpDelete {
		return fmt.Errorf("%s: %w", dgst, ErrDeleting)
	}
	c.addRefLocked(dgst.String(), n.id)
	delete(c.completed, dgst.String())
	return nil
}

func (n *fakeNode) Lock(ctx context.Context, req LockRequest) (Lock, error) {
	c := n.c
	c.mu.Lock()
	call := fakeCall{Node: n.id, Method: "Lock", Resource: req.ResourceID, Op: req.Type, Reap: req.Reap}
	lk, w, err := c.lockLocked(&call, n.id, req)
	if lk != nil {
		call.WithReapLock = lk.withReapLock
	}
	if w == nil {
		c.end(call, err)
		c.mu.Unlock()
		if err != nil {
			return nil, err
		}
		return lk, nil
	}
	c.queues[req.ResourceID] = append(c.queues[req.ResourceID], w)
	c.notifyLocked()
	c.mu.Unlock()
	select {
	case a := <-w.answer:
		c.mu.Lock()
		c.end(call, a.err)
		c.mu.Unlock()
		if a.err != nil {
			return nil, a.err
		}
		return a.lk, nil
	case <-ctx.Done():
		c.mu.Lock()
		defer c.mu.Unlock()
		q := c.queues[req.ResourceID]
		if i := slices.Index(q, w); i >= 0 {
			c.queues[req.ResourceID] = slices.Delete(q, i, i+1)
		} else if a := <-w.answer; a.err == nil {
			// Granted just now: give it back.
			c.releaseLocked(a.lk, false)
		}
		c.end(call, ctx.Err())
		return nil, ctx.Err()
	}
}

// lockLocked grants req, refuses it, or returns the waiter to queue.
// Callers hold mu.
func (c *fakeCluster) lockLocked(call *fakeCall, node string, req LockRequest) (*fakeLock, *fakeWaiter, error) {
	if err := c.begin(call); err != nil {
		return nil, nil, err
	}
	if req.Type == OpDelete && req.Reap == "" && c.refs[req.ResourceID] != nil {
		delete(c.refs[req.ResourceID], node)
	}
	if held := c.locks[req.ResourceID]; held != nil {
		if !req.Wait {
			return nil, nil, fmt.Errorf("%s:%s held by %s: %w", held.op, req.ResourceID, held.node, ErrLocked)
		}
		return nil, &fakeWaiter{node: node, op: req.Type, answer: make(chan fakeAnswer, 1)}, nil
	}
	if req.Type == OpPull && c.pulled[req.ResourceID] {
		return nil, nil, fmt.Errorf("pull:%s: %w", req.ResourceID, ErrSkipped)
	}
	if err := c.checkDelete(node, req); err != nil {
		return nil, nil, err
	}
	return c.grantLocked(node, req.Type, req.ResourceID, req.Reap), nil, nil
}

// checkDelete applies the delete rule. Callers hold mu.
func (c *fakeCluster) checkDelete(node string, req LockRequest) error {
	if req.Type != OpDelete {
		return nil
	}
	if req.Reap != "" {
		if reap := c.locks[ReapLockResource]; reap == nil || reap.node != node {
			return fmt.Errorf("reap delete of %s without the reap lock: %w", req.ResourceID, errdefs.ErrPermissionDenied)
		}
	}
	for ref := range c.refs[req.ResourceID] {
		if req.Reap != ReapDangling || ref != node {
			return fmt.Errorf("delete:%s: %w", req.ResourceID, ErrInUse)
		}
	}
	for id, m := range c.members {
		if !m.synced {
			return fmt.Errorf("delete:%s: node %s: %w", req.ResourceID, id, ErrUnsynced)
		}
	}
	return nil
}

// grantLocked makes node the holder. Callers hold mu.
func (c *fakeCluster) grantLocked(node string, op Op, resource string, reap ReapMode) *fakeLock {
	c.fence++
	l := &fakeLock{c: c, node: node, op: op, resource: resource, reap: reap, fence: c.fence}
	if reap != "" {
		r := c.locks[ReapLockResource]
		l.withReapLock = r != nil && r.node == node
	}
	c.locks[resource] = l
	return l
}

// releaseLocked ends l with success or failure and answers the queue.
// Callers hold mu.
func (c *fakeCluster) releaseLocked(l *fakeLock, success bool) {
	if c.locks[l.resource] != l {
		return
	}
	delete(c.locks, l.resource)
	switch {
	case success && l.op == OpPull:
		c.pulled[l.resource] = true
		c.addRefLocked(l.resource, l.node)
		delete(c.completed, l.resource)
	case success && l.op == OpDelete:
		delete(c.pulled, l.resource)
		c.completed[l.resource] = DeleteCompletion{Done: true, Fence: l.fence}
		if l.reap == ReapDangling {
			delete(c.refs[l.resource], l.node)
		}
	}
	q := c.queues[l.resource]
	for len(q) > 0 {
		w := q[0]
		q = q[1:]
		if w.op == OpPull && c.pulled[l.resource] {
			w.answer <- fakeAnswer{err: fmt.Errorf("pull:%s: %w", l.resource, ErrSkipped)}
			continue
		}
		w.answer <- fakeAnswer{lk: c.grantLocked(w.node, w.op, l.resource, "")}
		break
	}
	c.queues[l.resource] = q
}

func (l *fakeLock) Unlock(_ context.Context, success bool, _ error) (err error) {
	c := l.c
	c.mu.Lock()
	defer c.mu.Unlock()
	call := fakeCall{Node: l.node, Method: "Unlock", Resource: l.resource, Op: l.op, Success: success}
	defer func() { c.end(call, err) }()
	if err := c.begin(&call); err != nil {
		return err
	}
	if c.locks[l.resource] != l {
		return errors.New("fake: lock not held")
	}
	c.releaseLocked(l, success)
	return nil
}

func (l *fakeLock) Fence() uint64 { return l.fence }

// HeldUntil is a lease TTL from now while the fake holds the lock (its
// leases never expire), zero once it does not.
func (l *fakeLock) HeldUntil() time.Time {
	c := l.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.locks[l.resource] != l {
		return time.Time{}
	}
	return time.Now().Add(c.ttl)
}

func (n *fakeNode) DeleteCompletion(_ context.Context, dgst digest.Digest) (dc DeleteCompletion, err error) {
	c := n.c
	c.mu.Lock()
	defer c.mu.Unlock()
	call := fakeCall{Node: n.id, Method: "DeleteCompletion", Resource: dgst.String()}
	defer func() { c.end(call, err) }()
	if err := c.begin(&call); err != nil {
		return DeleteCompletion{}, err
	}
	return c.completed[dgst.String()], nil
}

func (l *fakeLock) Check(context.Context) error {
	c := l.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.down {
		return errFakeDown
	}
	if c.locks[l.resource] != l {
		return errors.New("fake: lock not held")
	}
	return nil
}

func (n *fakeNode) Refs(_ context.Context, fn func(resource string, nodes []string) error) error {
	c := n.c
	c.mu.Lock()
	call := fakeCall{Node: n.id, Method: "Refs"}
	err := c.begin(&call)
	all := map[string][]string{}
	for r, nodes := range c.refs {
		all[r] = slices.Sorted(maps.Keys(nodes))
	}
	c.end(call, nil)
	c.mu.Unlock()
	if err != nil {
		return err
	}
	for _, r := range slices.Sorted(maps.Keys(all)) {
		if err := fn(r, all[r]); err != nil {
			return err
		}
	}
	return nil
}

func (n *fakeNode) Members(context.Context) (ms Membership, err error) {
	c := n.c
	c.mu.Lock()
	defer c.mu.Unlock()
	call := fakeCall{Node: n.id, Method: "Members"}
	defer func() { c.end(call, err) }()
	if err := c.begin(&call); err != nil {
		return Membership{}, err
	}
	ms.NodeExpiry = c.expiry
	for _, id := range slices.Sorted(maps.Keys(c.members)) {
		live := c.members[id].live
		ms.Nodes = append(ms.Nodes, MemberInfo{ID: id, Live: live, Absent: c.absent[id]})
	}
	return ms, nil
}

func (n *fakeNode) ExpireMember(_ context.Context, reapLock Lock, nodeID string, marker MarkerReport) (absent time.Duration, err error) {
	c := n.c
	c.mu.Lock()
	defer c.mu.Unlock()
	call := fakeCall{Node: n.id, Method: "ExpireMember", Resource: nodeID}
	defer func() { c.end(call, err) }()
	if err := c.begin(&call); err != nil {
		return 0, err
	}
	if l, ok := reapLock.(*fakeLock); !ok || c.locks[ReapLockResource] != l || l.node != n.id {
		return 0, fmt.Errorf("expire %s: not the reap lock: %w", nodeID, errdefs.ErrPermissionDenied)
	}
	m := c.members[nodeID]
	if m == nil || m.live || c.absent[nodeID] < c.expiry || marker.State == "" || marker.Unchanged < c.expiry {
		return 0, fmt.Errorf("expire %s: %w", nodeID, ErrNotExpired)
	}
	delete(c.members, nodeID)
	for _, nodes := range c.refs {
		delete(nodes, nodeID)
	}
	c.expired = append(c.expired, nodeID)
	return c.absent[nodeID], nil
}
