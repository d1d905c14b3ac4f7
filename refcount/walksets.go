package refcount

import "context"

// SetWalker is a Storage that walks every reference set in key order
// without building pages of them: each set's resource ID and nodes are
// handed to fn as the store holds them, valid only during the call. It
// is how BuildHashes reads a store of millions of references in memory
// that does not grow with them (docs/design.md §10.9); a store without it
// is read a page at a time (ListNodes).
type SetWalker interface {
	// WalkSets calls fn for every reference set, in the order of their
	// resource IDs, with its nodes in order. id, nodes and each node are
	// the store's own and valid only until fn returns. An error of fn
	// ends the walk and is returned.
	WalkSets(ctx context.Context, fn func(id []byte, nodes [][]byte) error) error
}

var _ SetWalker = (*BoltStorage)(nil)
