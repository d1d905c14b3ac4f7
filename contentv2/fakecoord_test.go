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
	"github.com/sharedcontent/sharedcontent/lockserver/api"
)

// fakeCluster is an in-memory coordinator for the store's unit tests: a
// lock per type and resource, a FIFO of waiters per resource, reference
// sets, sessions and members. Each node sees it through node(id), a
// Coordinator. It follows the rules the store relies on, simply, and the
// contract suite (contentv2/coordinatortest, run by contract_test.go and
// by contentv2/remote against the real coordinator) holds it to them:
//   - on one resource only a pull and an update are held together
//     (docs/design.md §3.2); a lock that is not free is api.ErrLocked, or a
//     place in the queue (Wait); a waiting pull or delete is answered
//     api.ErrSkipped when the holder's one of its type succeeds, and handed
//     the lock when it fails;
//   - a pull of a resource whose last pull succeeded is api.ErrSkipped, and so
//     is a delete of one whose last delete succeeded; a pull's success
//     adds its holder's reference;
//   - a delete drops the requester's reference (unless it reaps), then is
//     api.ErrInUse while another node references the resource, api.ErrUnsynced
//     while a member is not synced; a reap delete needs the reap lock
//     (api.ErrForbidden);
//   - a reference needs a live session (api.ErrNoSession); it is api.ErrDeleting
//     while a delete is held and, for a blob the node found, while the
//     last delete's completion stands (docs/design.md §8.9);
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
	locks   map[fakeKey]*fakeLock      // protected by mu; by type and resource
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
	// While it stands, a delete is api.ErrSkipped.
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
	// Session: the request; Resource and Type: a lock's or a reference's.
	Session  SessionRequest
	Resource string
	Type     api.OperationType
	Reap     api.ReapMode
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

// fakeKey names a lock: its type and resource.
type fakeKey struct {
	op       api.OperationType
	resource string
}

// reapKey is the reap lock's key.
var reapKey = fakeKey{api.OperationUpdate, api.ReapLockResource}

// fakeCompatible says whether locks of types a and b may be held together
// on one resource: only a pull and an update (docs/design.md §3.2).
func fakeCompatible(a, b api.OperationType) bool {
	return a != b && (a == api.OperationPull || a == api.OperationUpdate) && (b == api.OperationPull || b == api.OperationUpdate)
}

// fakeLock is a held lock.
type fakeLock struct {
	c        *fakeCluster
	node     string
	typ      api.OperationType
	resource string
	reap     api.ReapMode
	fence    uint64
	// withReapLock: the node held the reap lock when this reap delete
	// was granted.
	withReapLock bool
}

type fakeWaiter struct {
	node string
	typ  api.OperationType
	// answer receives the lock or the error once the holder is done.
	answer chan fakeAnswer
}

type fakeAnswer struct {
	lk  *fakeLock
	err error
}

var errFakeDown = fmt.Errorf("fake coordinator: connection refused: %w", errdefs.ErrUnavailable)

func newFakeCluster(ttl time.Duration) *fakeCluster {
	return &fakeCluster{id: "fake-cluster", ttl: ttl, started: time.Now(), locks: map[fakeKey]*fakeLock{},
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

// removeRefLocked drops node's reference to resource, and the set once it
// is empty: Refs lists no empty set. Callers hold mu.
func (c *fakeCluster) removeRefLocked(resource, node string) {
	delete(c.refs[resource], node)
	if len(c.refs[resource]) == 0 {
		delete(c.refs, resource)
	}
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
		return SessionInfo{}, fmt.Errorf("cluster %s asked, this is %s: %w", req.ClusterID, c.id, api.ErrWrongCluster)
	}
	m, known := c.members[n.id]
	if !known {
		m = &fakeMember{fresh: true}
		c.members[n.id] = m
	}
	if m.live && m.instance != req.InstanceID {
		return SessionInfo{}, fmt.Errorf("node %s: %w", n.id, api.ErrDuplicateNode)
	}
	if req.Echo == nil || !m.live {
		m.synced = false
	}
	m.instance, m.live = req.InstanceID, true
	call.Answer = SessionInfo{ClusterID: c.id, Epoch: max(c.epoch, 1), TTL: c.ttl, Synced: m.synced, Stamp: time.Since(c.started), NewMember: m.fresh}
	return call.Answer, nil
}

// forget drops node's member record and its references, as an operator's
// node forget does: its next session answer says it is a new member.
func (c *fakeCluster) forget(node string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.members, node)
	for resource := range c.refs {
		c.removeRefLocked(resource, node)
	}
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
		err = fmt.Errorf("fake sync: no echo: %w", api.ErrLate)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	call.Sync = refs
	defer func() { c.end(call, err) }()
	if err != nil {
		return err
	}
	for resource := range c.refs {
		c.removeRefLocked(resource, n.id)
	}
	for _, d := range refs {
		c.addRefLocked(d.String(), n.id)
	}
	if m := c.members[n.id]; m != nil && m.live {
		m.synced, m.fresh = true, false
	}
	return nil
}

func (n *fakeNode) AddRef(_ context.Context, dgst digest.Digest, found bool) (err error) {
	c := n.c
	c.mu.Lock()
	defer c.mu.Unlock()
	call := fakeCall{Node: n.id, Method: "AddRef", Resource: dgst.String()}
	defer func() { c.end(call, err) }()
	if err := c.begin(&call); err != nil {
		return err
	}
	if m := c.members[n.id]; m == nil || !m.live {
		return fmt.Errorf("refs %s: node %s: %w", dgst, n.id, api.ErrNoSession)
	}
	if l := c.locks[fakeKey{api.OperationDelete, dgst.String()}]; l != nil {
		return fmt.Errorf("%s: %w", dgst, api.ErrDeleting)
	}
	if found && c.completed[dgst.String()].Done {
		return fmt.Errorf("%s: found after its delete, maybe a stale view: %w", dgst, api.ErrDeleting)
	}
	c.addRefLocked(dgst.String(), n.id)
	delete(c.completed, dgst.String())
	return nil
}

func (n *fakeNode) Lock(ctx context.Context, req api.LockRequest) (Lock, error) {
	c := n.c
	c.mu.Lock()
	call := fakeCall{Node: n.id, Method: "Lock", Resource: req.ResourceID, Type: req.Type, Reap: req.Reap}
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
		} else if a := <-w.answer; a.lk != nil {
			// Granted just now: give it back.
			c.releaseLocked(a.lk, false)
		}
		c.end(call, ctx.Err())
		return nil, ctx.Err()
	}
}

// lockLocked grants req, refuses it, or returns the waiter to queue.
// Callers hold mu.
func (c *fakeCluster) lockLocked(call *fakeCall, node string, req api.LockRequest) (*fakeLock, *fakeWaiter, error) {
	if err := c.begin(call); err != nil {
		return nil, nil, err
	}
	if req.Type == api.OperationDelete && req.Reap == "" {
		c.removeRefLocked(req.ResourceID, node)
	}
	if err := c.checkDelete(node, req); err != nil {
		return nil, nil, err
	}
	if c.doneLocked(req.Type, req.ResourceID) && (req.Type != api.OperationDelete || req.Reap == "") { // the reaper listed the file: an old delete is no answer
		return nil, nil, fmt.Errorf("%s:%s: %w", req.Type, req.ResourceID, api.ErrSkipped)
	}
	if held := c.conflictLocked(req.Type, req.ResourceID); held != nil {
		if req.Wait != nil && !*req.Wait {
			return nil, nil, fmt.Errorf("%s:%s: %s:%s held by %s: %w", req.Type, req.ResourceID, held.typ, req.ResourceID, held.node, api.ErrLocked)
		}
		return nil, &fakeWaiter{node: node, typ: req.Type, answer: make(chan fakeAnswer, 1)}, nil
	}
	return c.grantLocked(node, req.Type, req.ResourceID, req.Reap), nil, nil
}

// doneLocked says whether a lock of op on resource is answered api.ErrSkipped:
// the last pull, or delete, of it succeeded. Callers hold mu.
func (c *fakeCluster) doneLocked(op api.OperationType, resource string) bool {
	switch op {
	case api.OperationPull:
		return c.pulled[resource]
	case api.OperationDelete:
		return c.completed[resource].Done
	}
	return false
}

// conflictLocked returns a held lock of resource that a lock of op may
// not be held beside, or nil. Callers hold mu.
func (c *fakeCluster) conflictLocked(op api.OperationType, resource string) *fakeLock {
	for _, held := range []api.OperationType{api.OperationPull, api.OperationUpdate, api.OperationDelete} {
		if l := c.locks[fakeKey{held, resource}]; l != nil && !fakeCompatible(op, held) {
			return l
		}
	}
	return nil
}

// checkDelete applies the delete rule. Callers hold mu.
func (c *fakeCluster) checkDelete(node string, req api.LockRequest) error {
	if req.Type != api.OperationDelete {
		return nil
	}
	if req.Reap != "" {
		if reap := c.locks[reapKey]; reap == nil || reap.node != node {
			return fmt.Errorf("reap delete of %s without the reap lock: %w", req.ResourceID, api.ErrForbidden)
		}
	}
	for ref := range c.refs[req.ResourceID] {
		if req.Reap != api.ReapDangling || ref != node {
			return fmt.Errorf("delete:%s: %w", req.ResourceID, api.ErrInUse)
		}
	}
	for id, m := range c.members {
		if !m.synced {
			return fmt.Errorf("delete:%s: node %s: %w", req.ResourceID, id, api.ErrUnsynced)
		}
	}
	return nil
}

func (l *fakeLock) key() fakeKey { return fakeKey{l.typ, l.resource} }

// grantLocked makes node the holder. Callers hold mu.
func (c *fakeCluster) grantLocked(node string, typ api.OperationType, resource string, reap api.ReapMode) *fakeLock {
	c.fence++
	l := &fakeLock{c: c, node: node, typ: typ, resource: resource, reap: reap, fence: c.fence}
	if reap != "" {
		r := c.locks[reapKey]
		l.withReapLock = r != nil && r.node == node
	}
	c.locks[l.key()] = l
	return l
}

// releaseLocked ends l with success or failure and answers the queue.
// Callers hold mu.
func (c *fakeCluster) releaseLocked(l *fakeLock, success bool) {
	if c.locks[l.key()] != l {
		return
	}
	delete(c.locks, l.key())
	switch {
	case success && l.typ == api.OperationPull:
		c.pulled[l.resource] = true
		c.addRefLocked(l.resource, l.node)
		delete(c.completed, l.resource)
	case success && l.typ == api.OperationDelete:
		delete(c.pulled, l.resource)
		c.completed[l.resource] = DeleteCompletion{Done: true, Fence: l.fence}
		if l.reap == api.ReapDangling {
			c.removeRefLocked(l.resource, l.node)
		} else {
			delete(c.refs, l.resource)
		}
	}
	c.queues[l.resource] = c.answerQueueLocked(l.resource)
}

// answerQueueLocked answers, earliest queued first, every waiter of
// resource whose type's work just succeeded (api.ErrSkipped) and the head of
// each type's queue that is now compatible with the holders (the lock),
// and returns the waiters left. Callers hold mu.
func (c *fakeCluster) answerQueueLocked(resource string) []*fakeWaiter {
	var left []*fakeWaiter
	blocked := map[api.OperationType]bool{} // a type whose head stays queued
	for _, w := range c.queues[resource] {
		switch {
		case blocked[w.typ]:
			left = append(left, w)
		case c.doneLocked(w.typ, resource):
			w.answer <- fakeAnswer{err: fmt.Errorf("%s:%s: %w", w.typ, resource, api.ErrSkipped)}
		case c.conflictLocked(w.typ, resource) != nil:
			blocked[w.typ] = true
			left = append(left, w)
		default:
			w.answer <- fakeAnswer{lk: c.grantLocked(w.node, w.typ, resource, "")}
		}
	}
	return left
}

func (l *fakeLock) Unlock(_ context.Context, success bool, _ error) (err error) {
	c := l.c
	c.mu.Lock()
	defer c.mu.Unlock()
	call := fakeCall{Node: l.node, Method: "Unlock", Resource: l.resource, Type: l.typ, Success: success}
	defer func() { c.end(call, err) }()
	if err := c.begin(&call); err != nil {
		return err
	}
	if c.locks[l.key()] != l {
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
	if c.locks[l.key()] != l {
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
	if c.locks[l.key()] != l {
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
	if l, ok := reapLock.(*fakeLock); !ok || l.key() != reapKey {
		return 0, fmt.Errorf("expire %s: not the reap lock: %w", nodeID, errdefs.ErrInvalidArgument)
	}
	if l := reapLock.(*fakeLock); c.locks[reapKey] != l || l.node != n.id {
		return 0, fmt.Errorf("expire %s: the reap lock is not held: %w", nodeID, api.ErrForbidden)
	}
	m := c.members[nodeID]
	if m == nil || m.live || c.absent[nodeID] < c.expiry || marker.State == "" || marker.Unchanged < c.expiry {
		return 0, fmt.Errorf("expire %s: %w", nodeID, api.ErrNotExpired)
	}
	delete(c.members, nodeID)
	for resource := range c.refs {
		c.removeRefLocked(resource, nodeID)
	}
	c.expired = append(c.expired, nodeID)
	return c.absent[nodeID], nil
}
