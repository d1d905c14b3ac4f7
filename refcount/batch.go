package refcount

import (
	"fmt"
	"slices"
	"time"

	"github.com/containerd/errdefs"

	"github.com/sharedcontent/sharedcontent/internal/synchash"
)

// MaxGroupWrites is the most writes one atomic group of a Batch should hold
// for every store to commit it in one transaction: etcd's default
// --max-txn-ops. The memory and bbolt stores have no such limit.
const MaxGroupWrites = 128

// Batch is a list of writes to a Storage that Storage.Commit applies in
// one transaction: all of them or none. It is how the coordinator changes
// what must change together (docs/design.md §8: adopt,
// forget, a delete's reference drop with its completion), and the unit a
// replicated store guards and sends as one request. Writes apply in the
// order they were added. The zero value is an empty batch; a Batch is not
// safe for concurrent use.
//
// Break divides a batch into atomic groups. A store that cannot hold the
// whole batch in one transaction (etcd: more than MaxGroupWrites writes, or
// about 1 MiB) may commit it one group after the other, in order, stopping
// at the first that fails; it never splits a group. A batch without Break
// is one group.
type Batch struct {
	writes []Write
	breaks []int // indexes of writes that start a new group, increasing
}

// WriteKind is the kind of one write of a Batch.
type WriteKind uint8

// The writes of a Batch. None is ever stored as such: the numbers may
// change.
const (
	WriteAddRef            WriteKind = iota // Node is added to Key's reference set
	WriteRemoveRef                          // Node is removed from Key's set; an emptied set is dropped
	WriteDropRefs                           // Key's reference set is dropped
	WriteReplaceNode                        // Node references exactly NodeRefs
	WritePutMember                          // Member is stored under Member.ID (Key)
	WriteDeleteMember                       // member Key is forgotten
	WritePutIdentity                        // the identity becomes Identity
	WritePutLeaseFenceMark                  // the lease fences' high-water mark becomes Uint64
	WritePutString                          // meta Key is String
	WritePutUint64                          // meta Key is Uint64
	WritePutDeleting                        // Key's delete is in flight: Deleting
	WriteDropDeleting                       // Key's in-flight delete marker is dropped
	WritePutDeleted                         // Key's delete completed: Deleted
	WriteDropDeleted                        // Key's delete completion is dropped
	WritePutLease                           // Key's lease Lease.LeaseID is recorded: Lease
	WriteDropLease                          // the record of Key's lease Lease.LeaseID is dropped
	WritePutPin                             // pin Key is recorded: Pin
	WriteDropPin                            // the record of pin Key is dropped
)

// Write is one write of a Batch. Key is the resource ID, the member ID or
// the meta key, as Kind says; the other fields are set for the kinds
// that use them.
type Write struct {
	Kind     WriteKind
	Key      string
	Node     string
	NodeRefs map[string]struct{}
	// Buckets, when set on a ReplaceNode, restricts it to the resource IDs
	// of those buckets (synchash.Bucket): the node's references in other
	// buckets are left as they are.
	Buckets  *BucketSet
	Member   Member
	Identity Identity
	String   string
	Uint64   uint64
	Deleting DeleteMarker
	Deleted  DeleteCompletion
	Lease    LeaseRecord
	Pin      PinRecord
}

// DeleteMarker records a granted delete that has not ended yet
// (docs/design.md §8.9). A coordinator that
// finds one when it starts cannot know whether the deleter renamed the
// blob away, so it counts the delete as completed.
type DeleteMarker struct {
	Node  string `json:"node_id"`
	Fence uint64 `json:"fence"`
	// Expires is the end of the lease the delete was granted with;
	// keepalives do not rewrite it (a write per renewal).
	Expires time.Time `json:"expires"`
}

// DeleteCompletion records a delete that succeeded, or whose lease lapsed
// (Lapsed): a node that still sees the blob has a stale view of it.
type DeleteCompletion struct {
	Node   string    `json:"node_id"`
	At     time.Time `json:"at"`
	Lapsed bool      `json:"lapsed,omitempty"`
	// Fence is the delete's lease fence (0 in a record written before it
	// was kept): a deleter whose unlock's answer was lost, and the reaper
	// settling a trash entry, unlink only for a successful completion of
	// that delete or a later one (docs/design.md §8.11).
	Fence uint64 `json:"fence,omitempty"`
}

// Deletes are the stored delete markers and completions, by resource ID.
type Deletes struct {
	InFlight  map[string]DeleteMarker
	Completed map[string]DeleteCompletion
}

// Len returns the number of writes in b.
func (b *Batch) Len() int { return len(b.writes) }

// Ops returns the writes of b, in order. The slice is b's own.
func (b *Batch) Writes() []Write { return b.writes }

// Break ends the current atomic group: the writes added before it and
// those added after it need not be in one transaction. A Break at the
// start of b, or right after another, does nothing.
func (b *Batch) Break() *Batch {
	if n := len(b.writes); n > 0 && (len(b.breaks) == 0 || b.breaks[len(b.breaks)-1] != n) {
		b.breaks = append(b.breaks, n)
	}
	return b
}

// Append appends o's writes to b as atomic groups of their own: those
// of o, after a Break. b then holds both batches' writes, b's first.
func (b *Batch) Append(o *Batch) *Batch {
	b.Break()
	n := len(b.writes)
	b.writes = append(b.writes, o.writes...)
	for _, end := range o.breaks {
		b.breaks = append(b.breaks, n+end)
	}
	return b
}

// Groups returns the atomic groups of b, in order; each is a subslice of
// Writes. A batch without Break is one group.
func (b *Batch) Groups() [][]Write {
	var out [][]Write
	start := 0
	for _, end := range slices.Concat(b.breaks, []int{len(b.writes)}) {
		if end > start {
			out = append(out, b.writes[start:end])
		}
		start = end
	}
	return out
}

// Head returns a new batch of the first n atomic groups of b (all of
// them when b has no more): what a store that commits b one group after
// the other has written when it stops after n.
func (b *Batch) Head(n int) *Batch {
	out := new(Batch)
	for i, g := range b.Groups() {
		if i == n {
			break
		}
		for _, op := range g {
			out.add(op)
		}
		out.Break()
	}
	return out
}

// Grow makes room in b for n more writes, each its own atomic group, so
// that a batch of many writes added one at a time is not copied as it
// grows (a Write is about 500 bytes: a first sync's 10,000 adds are 5 MB).
func (b *Batch) Grow(n int) *Batch {
	b.writes = slices.Grow(b.writes, n)
	b.breaks = slices.Grow(b.breaks, n)
	return b
}

func (b *Batch) add(op Write) *Batch {
	b.writes = append(b.writes, op)
	return b
}

// AddRef adds node to the resource's reference set.
func (b *Batch) AddRef(resourceID, node string) *Batch {
	return b.add(Write{Kind: WriteAddRef, Key: resourceID, Node: node})
}

// RemoveRef removes node from the resource's reference set, dropping the
// set when node was its last.
func (b *Batch) RemoveRef(resourceID, node string) *Batch {
	return b.add(Write{Kind: WriteRemoveRef, Key: resourceID, Node: node})
}

// DropRefs drops the resource's reference set.
func (b *Batch) DropRefs(resourceID string) *Batch {
	return b.add(Write{Kind: WriteDropRefs, Key: resourceID})
}

// ReplaceNode makes node a reference of exactly refs (nil: of nothing):
// node is added to every set of refs and removed from every other set
// (sets left empty are dropped). It is one write, but a store that keeps
// one key per reference set changes one key per set it touches.
func (b *Batch) ReplaceNode(node string, refs map[string]struct{}) *Batch {
	c := make(map[string]struct{}, len(refs))
	for id := range refs {
		c[id] = struct{}{}
	}
	return b.add(Write{Kind: WriteReplaceNode, Node: node, NodeRefs: c})
}

// ReplaceNodeBuckets is ReplaceNode restricted to the resource IDs of
// buckets (synchash.Bucket): within them node references exactly refs,
// outside them nothing changes (a sync by hash, docs/design.md §10). Every
// ID of refs must be in one of buckets.
func (b *Batch) ReplaceNodeBuckets(node string, buckets []int, refs map[string]struct{}) *Batch {
	b.ReplaceNode(node, refs)
	set := new(BucketSet)
	for _, i := range buckets {
		if i >= 0 && i < synchash.Buckets {
			set[i] = true
		}
	}
	b.writes[len(b.writes)-1].Buckets = set
	return b
}

// BucketSet is a set of buckets (synchash.Bucket).
type BucketSet [synchash.Buckets]bool

// Holds reports whether the resource ID is in one of the set's buckets;
// a nil set holds every ID.
func (s *BucketSet) Holds(resourceID string) bool {
	return s == nil || s[synchash.Bucket(resourceID)]
}

// List returns the buckets of the set, in order.
func (s *BucketSet) List() []int {
	var out []int
	for i, in := range s {
		if in {
			out = append(out, i)
		}
	}
	return out
}

// PutMember creates or replaces the member m.ID.
func (b *Batch) PutMember(m Member) *Batch {
	return b.add(Write{Kind: WritePutMember, Key: m.ID, Member: m})
}

// DeleteMember forgets the member id; an unknown one is not an error.
func (b *Batch) DeleteMember(id string) *Batch {
	return b.add(Write{Kind: WriteDeleteMember, Key: id})
}

// PutIdentity sets the coordinator's identity.
func (b *Batch) PutIdentity(id Identity) *Batch {
	return b.add(Write{Kind: WritePutIdentity, Identity: id})
}

// PutLeaseFenceMark sets the fence high-water mark.
func (b *Batch) PutLeaseFenceMark(hwm uint64) *Batch {
	return b.add(Write{Kind: WritePutLeaseFenceMark, Uint64: hwm})
}

// PutString sets the meta key to v. The keys of the identity and the
// fence high-water mark are reserved.
func (b *Batch) PutString(key, v string) *Batch {
	return b.add(Write{Kind: WritePutString, Key: key, String: v})
}

// PutUint64 sets the meta key to v, as PutString does.
func (b *Batch) PutUint64(key string, v uint64) *Batch {
	return b.add(Write{Kind: WritePutUint64, Key: key, Uint64: v})
}

// PutDeleting records that a delete of the resource is in flight.
func (b *Batch) PutDeleting(resourceID string, m DeleteMarker) *Batch {
	return b.add(Write{Kind: WritePutDeleting, Key: resourceID, Deleting: m})
}

// DropDeleting drops the resource's in-flight delete marker.
func (b *Batch) DropDeleting(resourceID string) *Batch {
	return b.add(Write{Kind: WriteDropDeleting, Key: resourceID})
}

// PutDeleted records the resource's delete completion.
func (b *Batch) PutDeleted(resourceID string, c DeleteCompletion) *Batch {
	return b.add(Write{Kind: WritePutDeleted, Key: resourceID, Deleted: c})
}

// DropDeleted drops the resource's delete completion.
func (b *Batch) DropDeleted(resourceID string) *Batch {
	return b.add(Write{Kind: WriteDropDeleted, Key: resourceID})
}

// check returns an error wrapping errdefs.ErrInvalidArgument if op cannot
// be applied: an empty key, node or member ID, an empty cluster ID, a
// reserved meta key, or an unknown kind.
func (op *Write) check() error {
	switch op.Kind {
	case WriteReplaceNode:
		if op.Node == "" {
			return errEmpty("node ID")
		}
		for id := range op.NodeRefs {
			if !op.Buckets.Holds(id) {
				return fmt.Errorf("refcount: replace of node %s: resource %q is outside the replaced buckets: %w", op.Node, id, errdefs.ErrInvalidArgument)
			}
		}
		return nil
	case WritePutIdentity:
		if op.Identity.ClusterID == "" {
			return errEmpty("cluster ID")
		}
		return nil
	case WritePutLeaseFenceMark:
		return nil
	case WriteAddRef, WriteRemoveRef:
		if op.Node == "" {
			return errEmpty("node ID")
		}
	case WritePutString, WritePutUint64:
		if reservedMeta(op.Key) {
			return fmt.Errorf("refcount: meta key %q is reserved: %w", op.Key, errdefs.ErrInvalidArgument)
		}
	case WritePutLease, WriteDropLease:
		if err := checkLease(op); err != nil {
			return err
		}
	case WritePutPin, WriteDropPin:
		if err := checkPin(op); err != nil {
			return err
		}
	case WriteDropRefs, WritePutMember, WriteDeleteMember, WritePutDeleting, WriteDropDeleting, WritePutDeleted, WriteDropDeleted:
	default:
		return fmt.Errorf("refcount: unknown write kind %d: %w", op.Kind, errdefs.ErrInvalidArgument)
	}
	if op.Key == "" {
		return errEmpty("key")
	}
	return nil
}

// checkAll checks each of writes.
func checkAll(writes []Write) error {
	for i := range writes {
		if err := writes[i].check(); err != nil {
			return err
		}
	}
	return nil
}

// touchesRefs reports whether op changes reference sets, and whether it
// may change any of them (ReplaceNode).
func (op *Write) touchesRefs() (some, all bool) {
	switch op.Kind {
	case WriteDropRefs, WriteAddRef, WriteRemoveRef:
		return true, false
	case WriteReplaceNode:
		return true, true
	}
	return false, false
}

func errEmpty(what string) error {
	return fmt.Errorf("empty %s: %w", what, errdefs.ErrInvalidArgument)
}
