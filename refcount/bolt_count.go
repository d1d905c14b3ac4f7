package refcount

import (
	"context"
	"fmt"

	bolt "go.etcd.io/bbolt"
)

var _ CountingSubmitter = (*BoltStorage)(nil)

// SubmitAddRef implements CountingSubmitter (docs/design.md §10.6): the add
// is ordered as Submit orders a Batch.AddRef, and the write transaction
// that applies it learns whether the node was in the set (the lookup of the
// node's key that the add makes anyway) and the set's size after it (the
// set bucket's sequence). So an add opens no read transaction of its own,
// before or after its write: Manager.AddRefOrdered asked RefState twice per
// add, each a bbolt read transaction, on the rollout's hottest path.
func (s *BoltStorage) SubmitAddRef(ctx context.Context, resourceID, node string) (wait func() (added bool, count int, err error)) {
	failed := func(err error) func() (bool, int, error) { return func() (bool, int, error) { return false, 0, err } }
	if err := s.usable(ctx); err != nil {
		return failed(err)
	}
	b := new(Batch).AddRef(resourceID, node)
	if err := checkAll(b.writes); err != nil {
		return failed(fmt.Errorf("refcount: commit: %w", err))
	}
	// Set by the committer's goroutine, read after done: the mutation may
	// run twice (alone, after a failed group), the last run counts.
	var added bool
	var n int
	done, err := s.file.writes.submit(func(tx *bolt.Tx) error {
		if err := s.owned(tx); err != nil {
			return err
		}
		var err error
		added, n, err = refsOf(tx).addCounted(resourceID, node)
		return err
	})
	if err != nil {
		return failed(err)
	}
	return func() (bool, int, error) {
		if err := commitErr(<-done); err != nil {
			return false, 0, err
		}
		return added, n, nil
	}
}

// addCounted is add, reporting whether node was not in the set yet and
// the set's size after it.
func (r boltRefs) addCounted(id, node string) (added bool, count int, err error) {
	added, err = addRef(r.sets, id, node)
	if err == nil && added {
		err = indexAdd(r.nodes, node, id)
	}
	if err != nil {
		return false, 0, err
	}
	return added, int(r.sets.Bucket([]byte(id)).Sequence()), nil
}
