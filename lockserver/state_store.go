package lockserver

import (
	"context"

	"github.com/sharedcontent/sharedcontent/refcount"
)

// The coordinator's durable state (the reference sets, the fence
// high-water mark, its identity, its members and its deletes) lives in one
// refcount.Storage, the Manager's: the Coordinator reads it directly and writes
// it only in batches through the Manager (Coordinator.commit), so that what
// must change together does, in one guarded transaction.

// commit writes b in one transaction (refcount.Storage.Commit) and records
// the outcome for readiness (wrote).
func (l *Coordinator) commit(ctx context.Context, b *refcount.Batch) error {
	return l.wrote(ctx, l.refs.Commit(ctx, b))
}
