package refcount

import (
	"fmt"
	"time"

	"github.com/containerd/errdefs"
)

// Batch is a list of writes to a Storage that Storage.Commit applies in
// one transaction: all of them or none. It is how the coordinator changes
// what must change together (SPEC §8: adopt, forget, a delete's reference
// drop with its completion), and the unit a replicated store guards and
// sends as one request. Writes apply in the order they were added. The
// zero value is an empty batch; a Batch is not safe for concurrent use.
type Batch struct {
	ops []Op
}

// OpKind is the kind of one write of a Batch.
type OpKind uint8

// The writes of a Batch.
const (
	OpSetRefs      OpKind = iota // Key's reference set becomes Refs (Storage.Set)
	OpDropRefs                   // Key's reference set is dropped (Storage.Delete)
	OpAddRef                     // Node is added to Key's reference set
	OpRemoveRef                  // Node is removed from Key's set; an emptied set is dropped
	OpReplaceNode                // Node references exactly NodeRefs (Storage.ReplaceNode)
	OpPutMember                  // Member is stored under Member.ID
	OpDeleteMember               // member Key is forgotten
	OpPutString                  // meta Key is String
	OpPutUint64                  // meta Key is Uint64
	OpPutDeleting                // Key's delete is in flight: Deleting
	OpDropDeleting               // Key's in-flight delete marker is dropped
	OpPutDeleted                 // Key's delete completed: Deleted
	OpDropDeleted                // Key's delete completion is dropped
)

// Op is one write of a Batch. Key is the resource ID, the member ID or
// the meta key, as Kind says; the other fields are set for the kinds
// that use them.
type Op struct {
	Kind     OpKind
	Key      string
	Node     string
	Refs     ReferenceCount
	NodeRefs map[string]struct{}
	Member   Member
	String   string
	Uint64   uint64
	Deleting DeleteMarker
	Deleted  DeleteCompletion
}

// DeleteMarker records a granted delete that has not ended yet (SPEC §8
// "Deletes are remembered"). A coordinator that finds one when it starts
// cannot know whether the deleter renamed the blob away, so it counts the
// delete as completed.
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
}

// Deletes are the persisted delete markers and completions, by resource ID.
type Deletes struct {
	InFlight  map[string]DeleteMarker
	Completed map[string]DeleteCompletion
}

// Len returns the number of writes in b.
func (b *Batch) Len() int { return len(b.ops) }

// Ops returns the writes of b, in order. The slice is b's own.
func (b *Batch) Ops() []Op { return b.ops }

func (b *Batch) add(op Op) *Batch {
	b.ops = append(b.ops, op)
	return b
}

// SetRefs stores rc as the resource's reference set.
func (b *Batch) SetRefs(resourceID string, rc ReferenceCount) *Batch {
	return b.add(Op{Kind: OpSetRefs, Key: resourceID, Refs: rc.Clone()})
}

// DropRefs drops the resource's reference set.
func (b *Batch) DropRefs(resourceID string) *Batch {
	return b.add(Op{Kind: OpDropRefs, Key: resourceID})
}

// AddRef adds node to the resource's reference set.
func (b *Batch) AddRef(resourceID, node string) *Batch {
	return b.add(Op{Kind: OpAddRef, Key: resourceID, Node: node})
}

// RemoveRef removes node from the resource's reference set.
func (b *Batch) RemoveRef(resourceID, node string) *Batch {
	return b.add(Op{Kind: OpRemoveRef, Key: resourceID, Node: node})
}

// ReplaceNode makes node a reference of exactly refs (nil: of nothing).
func (b *Batch) ReplaceNode(node string, refs map[string]struct{}) *Batch {
	c := make(map[string]struct{}, len(refs))
	for id := range refs {
		c[id] = struct{}{}
	}
	return b.add(Op{Kind: OpReplaceNode, Node: node, NodeRefs: c})
}

// PutMember creates or replaces the member m.ID.
func (b *Batch) PutMember(m Member) *Batch {
	return b.add(Op{Kind: OpPutMember, Key: m.ID, Member: m})
}

// DeleteMember forgets the member id.
func (b *Batch) DeleteMember(id string) *Batch {
	return b.add(Op{Kind: OpDeleteMember, Key: id})
}

// PutString sets the meta key to v.
func (b *Batch) PutString(key, v string) *Batch {
	return b.add(Op{Kind: OpPutString, Key: key, String: v})
}

// PutUint64 sets the meta key to v.
func (b *Batch) PutUint64(key string, v uint64) *Batch {
	return b.add(Op{Kind: OpPutUint64, Key: key, Uint64: v})
}

// PutDeleting records that a delete of the resource is in flight.
func (b *Batch) PutDeleting(resourceID string, m DeleteMarker) *Batch {
	return b.add(Op{Kind: OpPutDeleting, Key: resourceID, Deleting: m})
}

// DropDeleting drops the resource's in-flight delete marker.
func (b *Batch) DropDeleting(resourceID string) *Batch {
	return b.add(Op{Kind: OpDropDeleting, Key: resourceID})
}

// PutDeleted records the resource's delete completion.
func (b *Batch) PutDeleted(resourceID string, c DeleteCompletion) *Batch {
	return b.add(Op{Kind: OpPutDeleted, Key: resourceID, Deleted: c})
}

// DropDeleted drops the resource's delete completion.
func (b *Batch) DropDeleted(resourceID string) *Batch {
	return b.add(Op{Kind: OpDropDeleted, Key: resourceID})
}

// check returns an error wrapping errdefs.ErrInvalidArgument if op cannot
// be applied: an empty key, node or member ID, or an unknown kind.
func (op *Op) check() error {
	switch op.Kind {
	case OpReplaceNode:
		if op.Node == "" {
			return errEmpty("node ID")
		}
		return nil
	case OpAddRef, OpRemoveRef:
		if op.Node == "" {
			return errEmpty("node ID")
		}
	case OpSetRefs, OpDropRefs, OpPutMember, OpDeleteMember, OpPutString, OpPutUint64,
		OpPutDeleting, OpDropDeleting, OpPutDeleted, OpDropDeleted:
	default:
		return fmt.Errorf("refcount: unknown write kind %d: %w", op.Kind, errdefs.ErrInvalidArgument)
	}
	if op.Key == "" {
		return errEmpty("key")
	}
	return nil
}

// touchesRefs reports whether op changes reference sets, and whether it
// may change any of them (ReplaceNode).
func (op *Op) touchesRefs() (some, all bool) {
	switch op.Kind {
	case OpSetRefs, OpDropRefs, OpAddRef, OpRemoveRef:
		return true, false
	case OpReplaceNode:
		return true, true
	}
	return false, false
}
