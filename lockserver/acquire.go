package lockserver

import (
	"context"
	"fmt"

	"github.com/sharedcontent/sharedcontent/lockserver/api"
)

// Acquire is the blocking form of Lock for in-process callers (the
// embedded coordinator): it waits in the queue until the request is
// granted or skipped, or fails. Cancelling ctx takes the request out of the
// queue, or gives back a grant made meanwhile.
func (lk *locks) Acquire(ctx context.Context, req api.LockRequest) (api.LockResponse, error) {
	if req.RequestID == "" {
		req.RequestID = newID()
	}
	for {
		resp, err := lk.Lock(ctx, req)
		if err != nil || !resp.Queued {
			return resp, err
		}
		resp, retry, err := lk.await(ctx, req)
		if !retry {
			return resp, err
		}
	}
}

// await follows a queued request's events. retry means the subscription
// ended without an outcome and the request must be re-sent.
func (lk *locks) await(ctx context.Context, req api.LockRequest) (resp api.LockResponse, retry bool, err error) {
	sub, err := lk.Subscribe(req.Type, req.ResourceID, req.NodeID, req.RequestID)
	if err != nil {
		return api.LockResponse{}, false, err
	}
	defer sub.Close()
	if r := sub.First.Request; r != nil && (r.Acquired || r.Skip) {
		return *r, false, nil
	}
	if r := sub.First.Request; r == nil || !r.Queued {
		return api.LockResponse{}, true, nil
	}
	for {
		select {
		case ev, ok := <-sub.Events():
			if !ok {
				select {
				case <-lk.stop:
					return api.LockResponse{}, false, fmt.Errorf("%s:%s: coordinator stopped: %w", req.Type, req.ResourceID, api.ErrUnavailable)
				default:
					return api.LockResponse{}, true, nil
				}
			}
			switch ev.Name {
			case api.EventGranted:
				if ev.Lease != nil {
					sub.Claimed(ev.Lease.LeaseID)
					return *ev.Lease, false, nil
				}
			case api.EventCompleted:
				return api.LockResponse{RequestID: req.RequestID, Skip: true, RefAdded: ev.RefAdded}, false, nil
			case api.EventError:
				return api.LockResponse{}, false, api.FromResponse(0, *ev.Error)
			}
		case <-ctx.Done():
			// Leave the queue, or give back what was granted meanwhile.
			_ = lk.Cancel(context.WithoutCancel(ctx), api.CancelRequest{Type: req.Type, ResourceID: req.ResourceID, NodeID: req.NodeID, RequestID: req.RequestID})
			return api.LockResponse{}, false, ctx.Err()
		}
	}
}
