package lockserver

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/sharedcontent/sharedcontent/refcount"
)

// The coordinator's durable state (the reference sets, the fence
// high-water mark, its identity, its members and its deletes) lives in one
// refcount.Storage, the Manager's: the Coordinator reads it directly and writes
// it only in batches through the Manager (store.commit), so that what
// must change together does, in one guarded transaction. Every part
// writes through one store, which also keeps the readiness that a failed
// write takes away (health.go).

// store is the coordinator's durable state as its parts write it.
type store struct {
	// refs writes every batch that changes a reference set or has to be
	// ordered with one.
	refs *refcount.Manager
	// state is the Manager's storage; written only through it, but for
	// the lease records (leases.go).
	state   refcount.Storage
	metrics *metrics
	now     func() time.Time
	// failing is set from a failed database write until one succeeds
	// (health.go).
	failing atomic.Bool
}

// commit writes b in one transaction (refcount.Storage.Commit) and records
// the outcome for readiness (wrote).
func (s *store) commit(ctx context.Context, b *refcount.Batch) error {
	return s.wrote(ctx, s.refs.Commit(ctx, b))
}
