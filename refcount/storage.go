package refcount

import "context"

// Storage persists what a coordinator keeps across restarts: reference
// counts by resource ID, the members (MemberStore), small named values
// (MetaStore) and the deletes in flight or completed (SPEC §8). All of it
// lives in one database, and Commit changes any part of it in one
// transaction. Implementations are safe for concurrent use. A mutation is
// durable when it returns (for the implementations that persist at all);
// each single-write method is a one-write Commit.
//
// Every method but Close returns ctx.Err() when ctx is already done; a
// mutation that has started is not interrupted. Values are copied in and out:
// changing the ReferenceCount passed to Set, or one returned by Get or List,
// never changes what is stored. A stored Count is always len(Nodes).
type Storage interface {
	// Get returns the resource's reference count, or an error wrapping
	// errdefs.ErrNotFound when the resource has no entry.
	Get(ctx context.Context, resourceID string) (ReferenceCount, error)
	// Set stores rc as the resource's entry. An empty set is stored as is;
	// use Delete to drop an entry. An empty resourceID is an error wrapping
	// errdefs.ErrInvalidArgument.
	Set(ctx context.Context, resourceID string, rc ReferenceCount) error
	// Delete drops the resource's entry. Deleting an absent entry is not an
	// error.
	Delete(ctx context.Context, resourceID string) error
	// List calls fn for every entry, in resource ID order, until fn returns
	// an error, which List returns. fn sees a snapshot taken when List
	// starts and is called with no lock held, so it may call the Storage.
	List(ctx context.Context, fn func(resourceID string, rc ReferenceCount) error) error
	// ReplaceNode makes node a reference of exactly the resources in refs,
	// in one atomic step: node is added to every entry of refs and removed
	// from every other entry (entries left empty are dropped). A nil refs
	// removes node everywhere. An empty node is an error wrapping
	// errdefs.ErrInvalidArgument.
	ReplaceNode(ctx context.Context, node string, refs map[string]struct{}) error
	// Commit applies every write of b, in order, in one transaction: when
	// it returns an error, none of them was made. A write that cannot be
	// applied (an empty key, an empty node ID) is an error wrapping
	// errdefs.ErrInvalidArgument. An empty batch writes nothing.
	Commit(ctx context.Context, b *Batch) error
	// Deletes returns the delete markers and completions stored by Commit.
	Deletes(ctx context.Context) (Deletes, error)
	MemberStore
	MetaStore
	// Close releases the storage.
	Close() error
}

// entry is one resource's reference count in a List snapshot.
type entry struct {
	id string
	rc ReferenceCount
}

// visit calls fn on each entry in order. It stops at the first error from fn,
// or when ctx is done, and returns that error.
func visit(ctx context.Context, entries []entry, fn func(string, ReferenceCount) error) error {
	for _, e := range entries {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := fn(e.id, e.rc); err != nil {
			return err
		}
	}
	return nil
}
