package lockclient

import (
	"context"

	"github.com/sharedcontent/sharedcontent/lockserver/api"
)

// Transport carries a Client's calls to the coordinator: the coordinator's
// operations (docs/design.md §3) in their wire types. The HTTP transport of
// New implements it, and so does the in-process coordinator,
// *lockserver.Coordinator (NewEmbedded); a Client adds node IDs, request IDs,
// retries, leases and keepalive on top.
//
// Errors of refusals match the sentinels of this package (api.ErrLocked,
// api.ErrInUse, ...); any other error is treated as transient and retried. All
// methods must be safe for concurrent use.
type Transport interface {
	// Lock acquires, skips, queues or refuses; it never waits. The same
	// RequestID again gets the same answer (idempotent).
	Lock(ctx context.Context, req api.LockRequest) (api.LockResponse, error)
	// Acquire is Lock followed by waiting in the queue: it returns only
	// once the request is acquired or skipped, or fails. When ctx ends it
	// takes the request out of the queue, or gives back a grant made
	// meanwhile, before returning ctx's error. req.RequestID is set.
	Acquire(ctx context.Context, req api.LockRequest) (api.LockResponse, error)
	// Unlock releases a lease with the outcome; idempotent for the same
	// lease and outcome.
	Unlock(ctx context.Context, req api.UnlockRequest) (api.UnlockResponse, error)
	// Keepalive renews a lease; api.ErrNotHolder when it is gone.
	Keepalive(ctx context.Context, req api.KeepaliveRequest) (api.KeepaliveResponse, error)
	// Cancel takes a request out of its queue or gives back its grant.
	// Cancelling an unknown request is not an error.
	Cancel(ctx context.Context, req api.CancelRequest) error
	// Status reports a key's holder, completion and queue, and the state
	// of requestID when it is not empty.
	Status(ctx context.Context, typ api.OperationType, resourceID, nodeID, requestID string) (api.StatusResponse, error)
	// AddRef adds nodeID's reference to the resource.
	AddRef(ctx context.Context, resourceID, nodeID string) (api.RefsResponse, error)
	// AddFoundRef adds nodeID's reference to a resource it found present;
	// refused also when a delete of it succeeded since its last pull or
	// reference (api.RefsAddRequest.Found).
	AddFoundRef(ctx context.Context, resourceID, nodeID string) (api.RefsResponse, error)
	// Refs returns the resource's reference set.
	Refs(ctx context.Context, resourceID string) (api.RefsResponse, error)
	// RefsList returns the reference sets after `after`, a page at a time.
	RefsList(ctx context.Context, after string, limit int) (api.RefsListResponse, error)

	// Session opens or renews a node's session (docs/design.md §8.3).
	Session(ctx context.Context, req api.SessionRequest) (api.SessionResponse, error)
	// EndSession ends a node's session if the instance holds it live;
	// otherwise it changes nothing and the answer says why.
	EndSession(ctx context.Context, req api.EndSessionRequest) (api.EndSessionResponse, error)
	// SyncRefs sends one chunk of a node's full sync.
	SyncRefs(ctx context.Context, nodeID string, req api.SyncRequest) (api.SyncResponse, error)
	// NodesPage lists the members and their state, those whose ID sorts
	// after `after`, at most limit (0: all).
	NodesPage(ctx context.Context, after string, limit int) (api.NodesResponse, error)
	// Held lists the locks of a type held now and their queues (admin).
	Held(ctx context.Context, typ api.OperationType) (api.HeldLocksResponse, error)
	// Forget drops a member and its references (admin).
	Forget(ctx context.Context, nodeID string) error
	// Adopt makes the coordinator take a shared root's cluster (admin).
	Adopt(ctx context.Context, req api.AdoptRequest) (api.Cluster, error)
	// Release lets another host take over a node ID (admin).
	Release(ctx context.Context, nodeID string) (api.ReleaseResponse, error)
	// Expire forgets a member shown gone (the reaper, or admin).
	Expire(ctx context.Context, nodeID string, req api.ExpireRequest) (api.ExpireResponse, error)
}
