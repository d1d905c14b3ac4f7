package refcount

import (
	"context"
	"fmt"
	"time"

	"github.com/containerd/errdefs"
)

// Storage is one handle on the coordinator's durable state: the reference
// sets, the members, the coordinator's identity, the lease fences'
// high-water mark, small meta values, the deletes in flight or completed, the
// leases recorded to survive a failover and the pins. All of
// it lives in one store, and the one way to change any of it is Commit,
// which applies a Batch in one guarded transaction (see the package
// documentation for the guard and for the limits of one transaction).
//
// Implementations are safe for concurrent use. A Commit is durable when it
// returns (for the stores that persist at all). Every method but OwnerFence and
// Close returns ctx.Err() when ctx is already done; a Commit that has
// started is not interrupted. Values are copied in and out: changing a
// Batch's arguments, or a value a read returns, never changes what is
// stored. A stored reference set is never empty: its last node removed,
// it is dropped.
//
// Reads see the state as the last Commit through any handle left it; they
// are not guarded, so a handle that was taken over still reads (what it
// reads may be stale). After Close every call but OwnerFence and Close fails.
type Storage interface {
	// Get returns the resource's reference set, or an error wrapping
	// errdefs.ErrNotFound when the resource has none.
	Get(ctx context.Context, resourceID string) (Set, error)
	// List returns, in resource ID order, up to limit reference sets with
	// a resource ID greater than after ("" starts at the first). A page
	// shorter than limit is the last one. limit must be positive (an
	// error wrapping errdefs.ErrInvalidArgument otherwise); each call is
	// one read, so a store answers a page in one request.
	List(ctx context.Context, after string, limit int) ([]Entry, error)
	// ListMembers returns every member, in ID order.
	ListMembers(ctx context.Context) ([]Member, error)
	// Identity returns the coordinator's identity, the zero Identity when
	// none was ever put.
	Identity(ctx context.Context) (Identity, error)
	// LeaseFenceMark returns the high-water mark of the lease fences
	// (PutLeaseFenceMark): every lease fence handed out is at most it; 0
	// when none was ever put.
	LeaseFenceMark(ctx context.Context) (uint64, error)
	// GetUint64 returns the meta value of key, or 0 and a nil error when
	// key was never put.
	GetUint64(ctx context.Context, key string) (uint64, error)
	// GetString returns the meta string of key, or "" and a nil error when
	// key was never put.
	GetString(ctx context.Context, key string) (string, error)
	// Deletes returns the delete markers and completions.
	Deletes(ctx context.Context) (Deletes, error)
	// Leases returns the lease records, in resource ID and then lease ID
	// order.
	Leases(ctx context.Context) ([]LeaseRecord, error)
	// Pins returns the pin records, in name order (docs/design.md §8.21).
	Pins(ctx context.Context) ([]PinRecord, error)
	// RefState returns whether node is in the resource's reference set
	// and the set's size (false and 0 when it has none) without reading
	// the set: O(1) in memory, O(log N) on bbolt, one read on etcd. The
	// Manager adds a reference at a cost that does not grow with the set
	// (docs/design.md §10.2).
	RefState(ctx context.Context, resourceID, node string) (has bool, count int, err error)
	// NodeRefs returns the resources in whose sets node is, in resource
	// ID order (none: an empty list), from the store's index of the
	// resources each node references, in one read; it always equals what
	// the sets say. ReplaceNode reads that index, and so costs O(the
	// node's references) (docs/design.md §7.1, §10.2).
	NodeRefs(ctx context.Context, node string) ([]string, error)

	// Commit applies every write of b, in order, in one transaction that
	// first checks the handle's guard: when it returns an error, none of
	// the writes was made. A handle that another one has taken over fails
	// with an error wrapping ErrFenced. A write that cannot be applied (an
	// empty key, an empty node ID, a reserved meta key) is an error
	// wrapping errdefs.ErrInvalidArgument. An empty batch writes nothing
	// and checks nothing.
	Commit(ctx context.Context, b *Batch) error
	// Submit is Commit in two halves, so that a caller can order its
	// writes under its own mutex without holding that mutex through the
	// disk's flush: Submit orders b after every batch submitted or
	// committed through the store before it returns, and before every one
	// after; wait returns what Commit would have returned, once the batch
	// is durable. Until then reads may not see b. Commit(ctx, b) is
	// Submit(ctx, b)().
	Submit(ctx context.Context, b *Batch) (wait func() error)
	// OwnerFence returns the ownership fence this handle holds (its
	// guard): its Commits succeed only while no handle with a greater
	// ownership fence has taken the state over. It is not a lease's fence
	// (LeaseFenceMark keeps those).
	OwnerFence() uint64
	// Close releases the handle.
	Close() error
}

// LocalStorage is a Storage whose handles live in one process: the memory
// and bbolt stores. TakeOver opens another handle on the same state that
// takes it over, as a new leader does on a replicated store: from then on
// the Commits of every earlier handle fail with ErrFenced. On bbolt, where
// one process at a time holds the file, a restart is the other way an
// owner takes over (opening the file bumps the stored owner).
type LocalStorage interface {
	Storage
	TakeOver(ctx context.Context) (LocalStorage, error)
}

// ErrFenced is the error of a Commit through a handle that another handle
// has taken over since it was opened: its owner is no longer the store's.
// It wraps errdefs.ErrFailedPrecondition.
var ErrFenced = fmt.Errorf("refcount: the storage was taken over by a newer owner: %w", errdefs.ErrFailedPrecondition)

// Entry is one resource's reference set in a List page.
type Entry struct {
	ResourceID string
	Refs       Set
}

// Identity is the coordinator's identity as it is stored: the cluster ID
// created with the state and the epoch that every start moves on.
type Identity struct {
	ClusterID string
	Epoch     uint64
	// Root is the cluster's shared root, as the first node that claimed
	// or named one sent it (docs/design.md §8.19); nil: none recorded.
	Root *RootClaim `json:",omitempty"`
}

// RootClaim identifies a cluster's shared root: its cluster file's
// creation time, and the node that created it (for messages).
type RootClaim struct {
	CreatedAt time.Time `json:"created_at"`
	CreatedBy string    `json:"created_by,omitempty"`
}

// fenced returns the error of a Commit through the handle with fence mine
// when the store's owner is now.
func fenced(mine, now uint64) error {
	return fmt.Errorf("refcount: commit: this handle's fence is %d, the owner's now %d: %w", mine, now, ErrFenced)
}

// checkList validates List's limit.
func checkList(limit int) error {
	if limit <= 0 {
		return fmt.Errorf("refcount: list limit %d: %w", limit, errdefs.ErrInvalidArgument)
	}
	return nil
}
