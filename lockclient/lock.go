package lockclient

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"time"

	"github.com/sharedcontent/sharedcontent/lockserver/api"
)

// LockResult is the outcome of Lock and TryLock: exactly one of Acquired
// and Skipped is set, or Error.
type LockResult struct {
	// Acquired: the caller holds the lock and must Unlock Lease.
	Acquired bool
	// Skipped: the work was done meanwhile (a pull or delete succeeded on
	// another request); nothing is held.
	Skipped bool
	// RefAdded, with Skipped: the coordinator recorded the node's
	// reference to the resource, as the request asked (api.LockRequest.AddRef,
	// docs/design.md §10.6); the node need not add it. False from a
	// coordinator that does not know the field.
	RefAdded bool
	// Lease is the held lock when Acquired.
	Lease *Lease
	// Error is the error Lock returned, if any.
	Error error
}

// Lock takes the lock, waiting in its FIFO queue while it is held, until it
// is acquired, the operation is skipped, or it fails.
//
// One random request ID is used for every attempt of the call, so a retry
// after a lost answer gets the same grant or queue place. Network errors,
// timeouts and 5xx answers are retried (WithMaxRetries, WithRetryInterval);
// after the last retry the error matches api.ErrUnavailable. Refusals are
// returned at once and match api.ErrInUse (an *api.InUseError naming the other
// users), api.ErrLocked (the coordinator does not queue: wait_by_default
// is off), api.ErrInvalidArgument or api.ErrUnauthorized.
//
// Cancelling ctx takes the caller out of the queue, or gives back a grant
// that arrived meanwhile; Lock then returns ctx's error and holds nothing.
//
// req names the lock (Type, ResourceID, Reap, AddRef) and, in NodeID, the
// node it is taken for (empty: the client's, WithNodeID). Its RequestID and Wait
// are the client's own: a new request ID per call, and Wait left to the
// coordinator's default (TryLock: false).
//
// The result is never nil; err != nil exactly when result.Error != nil.
// When Acquired, the lease is renewed in the background until Unlock.
func (c *Client) Lock(ctx context.Context, req api.LockRequest) (*LockResult, error) {
	return c.lock(ctx, req, true)
}

// TryLock is Lock without waiting: a held lock fails at once with
// api.ErrLocked. Transient errors are still retried, with the same request ID.
func (c *Client) TryLock(ctx context.Context, req api.LockRequest) (*LockResult, error) {
	return c.lock(ctx, req, false)
}

// ClusterLock is the one-call helper of the content store (the seeds'
// client.ClusterLock): Lock of req on c, with req.NodeID defaulting to c's
// node.
func ClusterLock(ctx context.Context, c *Client, req *api.LockRequest) (*LockResult, error) {
	if c == nil || req == nil {
		err := fmt.Errorf("lockclient: ClusterLock needs a client and a request: %w", api.ErrInvalidArgument)
		return &LockResult{Error: err}, err
	}
	return c.Lock(ctx, *req)
}

func (c *Client) lock(ctx context.Context, req api.LockRequest, wait bool) (*LockResult, error) {
	lr, err := c.lockRequest(req)
	if err != nil {
		return failed(err)
	}
	if !wait {
		lr.Wait = new(bool)
	}
	what := call{op: "lock", typ: lr.Type, id: lr.ResourceID}
	ctx = withCallFields(ctx, callFields{typ: lr.Type, resourceID: lr.ResourceID, requestID: lr.RequestID})
	if c.isClosed() {
		return failed(fmt.Errorf("%s: client closed: %w", what, api.ErrUnavailable))
	}

	var (
		resp api.LockResponse
		// tried: an attempt may have reached the coordinator. cleaned: an
		// Acquire saw ctx end and gave the request back itself.
		tried, cleaned bool
		sent           time.Time // the last attempt's
	)
	err = c.retry(ctx, what, func(ctx context.Context) error {
		var err error
		tried = true
		sent = time.Now()
		if wait {
			resp, err = c.transport.Acquire(ctx, lr)
			cleaned = ctx.Err() != nil
		} else {
			resp, err = c.transport.Lock(ctx, lr)
		}
		return err
	})
	received := time.Now()
	switch {
	case err != nil:
		if ctx.Err() != nil && tried && !cleaned {
			// Ended between attempts, or inside one that may have reached
			// the coordinator: leave nothing behind.
			giveBack(ctx, c.transport, lr, c.opts.requestTimeout)
		}
		return failed(err)
	case resp.Skip:
		return &LockResult{Skipped: true, RefAdded: resp.RefAdded && lr.AddRef}, nil
	case !resp.Acquired:
		giveBack(ctx, c.transport, lr, c.opts.requestTimeout)
		return failed(fmt.Errorf("%s: coordinator answered neither acquired nor skipped (queued=%v)", what, resp.Queued))
	case ctx.Err() != nil:
		giveBack(ctx, c.transport, lr, c.opts.requestTimeout)
		return failed(fmt.Errorf("%s: %w", what, ctx.Err()))
	}
	lease := newLease(lr, resp)
	lease.start(ctx, c.transport, c.opts.requestTimeout, sent, received)
	if !c.track(lease) {
		lease.stop()
		giveBack(ctx, c.transport, lr, c.opts.requestTimeout)
		return failed(fmt.Errorf("%s: client closed: %w", what, api.ErrUnavailable))
	}
	if debugEnabled(ctx) {
		logger(ctx).WithField("fence", lease.Fence).Debug("lock acquired")
	}
	return &LockResult{Acquired: true, Lease: lease}, nil
}

func failed(err error) (*LockResult, error) { return &LockResult{Error: err}, err }

// lockRequest validates req and gives it the client's node and a new
// request ID.
func (c *Client) lockRequest(req api.LockRequest) (api.LockRequest, error) {
	if !req.Type.Valid() {
		return api.LockRequest{}, fmt.Errorf("lock type %q: must be pull, update or delete: %w", req.Type, api.ErrInvalidArgument)
	}
	if req.ResourceID == "" {
		return api.LockRequest{}, fmt.Errorf("lock %s: resource ID is empty: %w", req.Type, api.ErrInvalidArgument)
	}
	if req.NodeID == "" {
		req.NodeID = c.opts.nodeID
	}
	if req.AddRef && req.Type != api.OperationPull {
		return api.LockRequest{}, fmt.Errorf("lock %s:%s: add_ref is for a pull's skip only: %w", req.Type, req.ResourceID, api.ErrInvalidArgument)
	}
	return api.LockRequest{Type: req.Type, ResourceID: req.ResourceID, NodeID: req.NodeID, RequestID: newRequestID(), Reap: req.Reap, AddRef: req.AddRef}, nil
}

// Unlock releases lease with the outcome of the work: success records the
// result (a pull's node becomes a reference, and waiters of a pull or delete
// skip); failure hands the lock to the next waiter. opErr, when not
// success, is reported to the coordinator for its logs.
//
// Unlock runs even when ctx is already cancelled: it keeps ctx's values but
// not its cancellation, and is bounded by the retry budget
// ((MaxRetries+1) × (request timeout + retry interval)). It first stops the
// lease's keepalive and waits for it to end. Transient errors are retried;
// the coordinator answers a repeated Unlock with the same outcome as the
// first. An error matching api.ErrNotHolder means the coordinator had already
// taken the lock back (Lease.Lost had closed, or it restarted): the outcome
// was not recorded.
func (c *Client) Unlock(ctx context.Context, lease *Lease, success bool, opErr error) error {
	if lease == nil {
		return fmt.Errorf("unlock: nil lease: %w", api.ErrInvalidArgument)
	}
	lease.stop()
	c.untrack(lease)

	// The release runs even when ctx has ended. It is bounded without a
	// timer of its own: each attempt by the request timeout, and at most
	// 1+MaxRetries attempts.
	ctx = context.WithoutCancel(ctx)
	ctx = withCallFields(ctx, callFields{typ: lease.Type, resourceID: lease.ResourceID, fence: lease.Fence})
	req := api.UnlockRequest{Type: lease.Type, ResourceID: lease.ResourceID, LeaseID: lease.ID, NodeID: lease.NodeID, Success: success}
	if !success && opErr != nil {
		req.Error = opErr.Error()
	}
	err := c.retry(ctx, call{op: "unlock", typ: lease.Type, id: lease.ResourceID}, func(ctx context.Context) error {
		_, err := c.transport.Unlock(ctx, req)
		return err
	})
	if err != nil {
		if lost := lease.Err(); lost != nil {
			err = fmt.Errorf("%w (%w)", err, lost)
		}
		return err
	}
	if debugEnabled(ctx) {
		logger(ctx).WithField("success", success).Debug("lock released")
	}
	return nil
}

// newRequestID returns 128 random bits, hex-encoded.
func newRequestID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
