package contentv2

import (
	"context"

	"github.com/sharedcontent/sharedcontent/lockclient"
	"github.com/sharedcontent/sharedcontent/lockserver/api"
)

// Coordinator is what the Store needs of the lock service. A
// *lockclient.Client satisfies it, talking to a remote lock server over
// HTTP or to an embedded one in-process.
type Coordinator interface {
	// Lock waits until the lock is acquired or the work was skipped.
	Lock(ctx context.Context, req lockclient.Request) (*lockclient.LockResult, error)
	// TryLock never waits: a held lock is lockclient.ErrLocked.
	TryLock(ctx context.Context, req lockclient.Request) (*lockclient.LockResult, error)
	// Unlock releases a lease with the outcome of the work.
	Unlock(ctx context.Context, lease *lockclient.Lease, success bool, opErr error) error
	// AddRef registers this node as a user of the resource.
	AddRef(ctx context.Context, resourceID string) (api.RefsResponse, error)
}
