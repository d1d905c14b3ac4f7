package lockserver

import (
	"time"

	"github.com/sharedcontent/sharedcontent/lockserver/api"
)

// typeIndex orders the three lock types inside a resource.
type typeIndex int

const (
	idxPull typeIndex = iota
	idxUpdate
	idxDelete
	numTypes
)

var typeNames = [numTypes]api.OperationType{api.OperationPull, api.OperationUpdate, api.OperationDelete}

func indexOf(t api.OperationType) (typeIndex, bool) {
	switch t {
	case api.OperationPull:
		return idxPull, true
	case api.OperationUpdate:
		return idxUpdate, true
	case api.OperationDelete:
		return idxDelete, true
	}
	return 0, false
}

// compatible[held][requested] is docs/design.md §3.2's matrix: only pull and update may
// run together on one resource.
var compatible = [numTypes][numTypes]bool{
	idxPull:   {idxUpdate: true},
	idxUpdate: {idxPull: true},
}

// resource is every lock of one resource_id. All fields are protected by the
// owning shard's mutex.
type resource struct {
	id   string
	keys [numTypes]key
}

// key is one (type, resource) lock: at most one holder and a FIFO queue.
type key struct {
	holder    *grant
	queue     waitQueue
	completed *completion // retained success (pull and delete only)
	watchers  map[*Subscription]struct{}
}

// request is one Lock call. A request is known by its node and its
// request ID together (docs/design.md §9): two nodes may use the same request ID, and
// neither can reach the other's request with it.
type request struct {
	typ       typeIndex
	nodeID    string
	requestID string
	reap      api.ReapMode // deletes only
	addRef    bool         // pulls only: a skip records the node's reference (api.LockRequest.AddRef)
}

// requestKey identifies a request: (node_id, request_id).
type requestKey struct{ node, id string }

func (r *request) key() requestKey { return requestKey{r.nodeID, r.requestID} }

// is reports whether r is the request (node, id).
func (r *request) is(node, id string) bool { return r.nodeID == node && r.requestID == id }

// grant is a held lock.
type grant struct {
	request
	leaseID  string
	fence    uint64
	acquired time.Time
	expires  time.Time // lease end; renewed by keepalive
	// claimed is set once the holder has been told of its grant; an
	// unclaimed grant is released at claimBy.
	claimed bool
	claimBy time.Time
	// recorded: the store holds the lease's record, which its end drops
	// (leases.go).
	recorded bool
}

// waiter is a queued request.
type waiter struct {
	request
	queued   time.Time
	lastSeen time.Time     // last /lock or /status poll, for stream-less waiters
	sub      *Subscription // attached event stream; nil when polling
	slot     int           // index in the queue's slots (waitQueue)
}

// completion is a retained successful pull or delete, or a delete whose
// lease lapsed (deletes.go).
type completion struct {
	nodeID string
	at     time.Time
	// lapsed: the delete's holder went without an unlock. Nobody skips
	// on it (the blob may still be there); stale views are refused.
	lapsed bool
	// fence is the delete's or pull's lease fence; 0 when unknown (a
	// completion loaded from the database, which does not keep it).
	fence uint64
	// refs: the waiters whose references a pull's success recorded in
	// its own write, as they asked (api.LockRequest.AddRef); a poll of
	// such a request (or its retry) is answered skip with RefAdded.
	refs map[requestKey]struct{}
}

// released remembers a lease that ended, so a retried Unlock with the same
// outcome is answered instead of refused. A shard keeps one per release
// for a lease TTL (hundreds of thousands under load): the map's keys and
// values hold no pointers, so the garbage collector does not scan it.
type released struct {
	success  bool
	typ      typeIndex
	resource uint32 // FNV-1a of the resource ID: a retry must name the same key
	node     uint32 // FNV-1a of the holder's node ID: a retry naming a node must name it
	at       int64  // UnixNano of the release
}

// leaseKey is a lease ID as a key of the released map. IDs are 32 hex
// digits (newID); another string was never a lease.
type leaseKey [32]byte

func leaseKeyOf(id string) (leaseKey, bool) {
	var k leaseKey
	if len(id) != len(k) {
		return k, false
	}
	copy(k[:], id)
	return k, true
}

func (r *resource) empty() bool {
	for i := range r.keys {
		k := &r.keys[i]
		if k.holder != nil || k.queue.Len() > 0 || k.completed != nil || len(k.watchers) > 0 {
			return false
		}
	}
	return true
}

// compatibleWith reports whether a lock of type t can be granted next to the
// resource's current holders.
func (r *resource) compatibleWith(t typeIndex) bool {
	for held := range numTypes {
		if r.keys[held].holder != nil && !compatible[held][t] {
			return false
		}
	}
	return true
}
