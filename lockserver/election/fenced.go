package election

import (
	"context"
	"errors"

	"github.com/sharedcontent/sharedcontent/refcount"
)

// reportingStorage is the term's store, which tells the replica of every
// write refused by the guard (refcount.ErrFenced): another replica has
// taken over, and this one steps down at once (docs/design.md §7). It
// checks the two ways to write, Commit and Submit, and the store's
// CountingSubmitter, which the reference hot path uses
// (refcount.Manager.AddRefOrdered); every other call is the store's own.
type reportingStorage struct {
	refcount.Storage
	fenced func(error)
}

var _ refcount.CountingSubmitter = (*reportingStorage)(nil)

func reportFenced(s refcount.Storage, fenced func(error)) *reportingStorage {
	return &reportingStorage{Storage: s, fenced: fenced}
}

func (s *reportingStorage) check(err error) error {
	if errors.Is(err, refcount.ErrFenced) {
		s.fenced(err)
	}
	return err
}

// Commit implements refcount.Storage.
func (s *reportingStorage) Commit(ctx context.Context, b *refcount.Batch) error {
	return s.check(s.Storage.Commit(ctx, b))
}

// Submit implements refcount.Storage.
func (s *reportingStorage) Submit(ctx context.Context, b *refcount.Batch) func() error {
	wait := s.Storage.Submit(ctx, b)
	return func() error { return s.check(wait()) }
}

// SubmitAddRef implements refcount.CountingSubmitter: the store's, or a
// Submit whose wait reads the set's size after it (the node taken as
// added).
func (s *reportingStorage) SubmitAddRef(ctx context.Context, resourceID, node string) func() (bool, int, error) {
	if cs, ok := s.Storage.(refcount.CountingSubmitter); ok {
		wait := cs.SubmitAddRef(ctx, resourceID, node)
		return func() (bool, int, error) {
			added, n, err := wait()
			return added, n, s.check(err)
		}
	}
	written := s.Submit(ctx, new(refcount.Batch).AddRef(resourceID, node))
	return func() (bool, int, error) {
		if err := written(); err != nil {
			return false, 0, err
		}
		_, n, err := s.RefState(ctx, resourceID, node)
		return true, n, err
	}
}
