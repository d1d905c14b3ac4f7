package election

import (
	"context"
	"errors"
	"fmt"

	"github.com/containerd/errdefs"

	"github.com/sharedcontent/sharedcontent/refcount"
)

// reportingStorage is the term's store, which tells the replica of every
// write refused by the guard (refcount.ErrFenced): another replica has
// taken over, and this one steps down at once (docs/design.md §7). It
// keeps the store's RefStater, Submitter and CountingSubmitter, which the
// reference hot path uses (refcount.Manager.AddRefOrdered), and its index by node
// (NodeRefLister), which big syncs and forgets read
// (refcount.Manager.ReplaceNodeGroups).
type reportingStorage struct {
	refcount.Storage
	fenced func(error)
}

var (
	_ refcount.RefStater         = (*reportingStorage)(nil)
	_ refcount.Submitter         = (*reportingStorage)(nil)
	_ refcount.CountingSubmitter = (*reportingStorage)(nil)
	_ refcount.NodeRefLister     = (*reportingStorage)(nil)
)

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

// Submit implements refcount.Submitter: the store's, or a Commit done
// before it returns.
func (s *reportingStorage) Submit(ctx context.Context, b *refcount.Batch) func() error {
	if sub, ok := s.Storage.(refcount.Submitter); ok {
		wait := sub.Submit(ctx, b)
		return func() error { return s.check(wait()) }
	}
	err := s.Commit(ctx, b)
	return func() error { return err }
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

// RefState implements refcount.RefStater: the store's, or read from the
// set.
func (s *reportingStorage) RefState(ctx context.Context, resourceID, node string) (bool, int, error) {
	if st, ok := s.Storage.(refcount.RefStater); ok {
		return st.RefState(ctx, resourceID, node)
	}
	set, err := s.Storage.Get(ctx, resourceID)
	if errdefs.IsNotFound(err) {
		return false, 0, nil
	}
	if err != nil {
		return false, 0, err
	}
	return set.Has(node), set.Len(), nil
}

// NodeRefs implements refcount.NodeRefLister: the store's (the etcd
// store keeps an index by node).
func (s *reportingStorage) NodeRefs(ctx context.Context, node string) ([]string, error) {
	nl, ok := s.Storage.(refcount.NodeRefLister)
	if !ok {
		return nil, fmt.Errorf("election: the store keeps no index by node: %w", errdefs.ErrNotImplemented)
	}
	return nl.NodeRefs(ctx, node)
}
