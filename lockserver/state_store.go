package lockserver

import (
	"context"

	"github.com/sharedcontent/sharedcontent/refcount"
)

// StateStore persists what the coordinator must keep across restarts
// besides the reference sets: the fence high-water mark, its identity and
// its members (SPEC §8). It is the reference storage itself
// (refcount.Storage implements it): the Locker reads it directly and
// writes it only in batches through the refcount Manager (Locker.commit),
// so that what must change together does, in one transaction.
type StateStore interface {
	FenceStore
	refcount.MemberStore
	GetString(ctx context.Context, key string) (string, error)
	PutString(ctx context.Context, key, v string) error
}

// commit writes b in one transaction (refcount.Storage.Commit) and records
// the outcome for readiness (wrote).
func (l *Locker) commit(ctx context.Context, b *refcount.Batch) error {
	return l.wrote(ctx, l.refs.Commit(ctx, b))
}
