package etcdstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/containerd/errdefs"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/sharedcontent/sharedcontent/refcount"
)

// Commit implements refcount.Storage: it is Submit(ctx, b)(), except that
// it does not wait for the flush interval: the batch is flushed at once,
// with the batches pending before it (see Submit). The batch is checked
// whole, then folded into the writes of as few transactions as the limits
// allow (one, for a batch that fits), each split at the batch's Break only
// and each guarded by If(CreateRevision(leader key) == fence): a handle
// whose leader key is gone or newer fails with an error wrapping
// refcount.ErrFenced, writing nothing more. A group too large for one
// transaction fails the Commit with an error wrapping
// errdefs.ErrResourceExhausted before anything is written.
//
// Unlike memory and bbolt, ctx bounds the wait for etcd: a Commit whose
// ctx ends while etcd has not answered (no quorum) returns ctx's error,
// and then, as any etcd request that timed out, it may still have been
// applied (never in part: each transaction is atomic).
func (s *Store) Commit(ctx context.Context, b *refcount.Batch) error {
	return s.submit(ctx, b, true)()
}

// commitAlone commits one batch's groups in as few transactions as fit,
// without other batches. Callers hold mu.
func (s *Store) commitAlone(ctx context.Context, groups [][]refcount.Write) error {
	p := newPlan(ctx, s)
	if err := p.batch(groups); err != nil {
		return err
	}
	txns, err := p.pack(s.opts.MaxTxnOps, s.opts.MaxTxnBytes)
	if err != nil {
		return err
	}
	done := 0
	for i, t := range txns {
		if _, err := s.guarded(ctx, t.ops, 0); err != nil {
			if i > 0 {
				return fmt.Errorf("etcdstore: commit: the first %d of the batch's %d atomic groups were committed: %w", done, len(p.groups), err)
			}
			return err
		}
		done += t.groups
	}
	return nil
}

// guarded commits ops in one transaction if the leader key still has the
// handle's fence as its create revision, and returns etcd's answer. The
// last `reads` of ops are reads (the counts of counted adds, after the
// writes), the rest writes. Once a guard failed, the handle is fenced for good (a key's
// create revision never comes back), so later calls fail at once,
// sending nothing.
func (s *Store) guarded(ctx context.Context, ops []clientv3.Op, reads int) (*clientv3.TxnResponse, error) {
	if err := s.lost.Load(); err != nil {
		return nil, *err
	}
	writes := ops[:len(ops)-reads]
	start := time.Now()
	resp, err := s.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(s.leader), "=", s.fence)).
		Then(ops...).
		Else(clientv3.OpGet(s.leader, clientv3.WithKeysOnly())).
		Commit()
	s.metrics.txn(time.Since(start), len(writes), opBytes(writes), err, err == nil && !resp.Succeeded)
	switch {
	case errors.Is(err, rpctypes.ErrTooManyOps), errors.Is(err, rpctypes.ErrRequestTooLarge):
		return nil, fmt.Errorf("etcdstore: commit of %d writes: %w: %w", len(writes), errdefs.ErrResourceExhausted, err)
	case err != nil:
		return nil, fmt.Errorf("etcdstore: commit of %d writes: %w", len(writes), err)
	case !resp.Succeeded:
		err := s.fenced(createRevision(resp.Responses[0].GetResponseRange().Kvs))
		s.lost.Store(&err)
		return nil, err
	}
	return resp, nil
}

// opBytes is what ops write: their keys and values.
func opBytes(ops []clientv3.Op) int {
	n := 0
	for _, op := range ops {
		n += len(op.KeyBytes()) + len(op.ValueBytes())
	}
	return n
}
