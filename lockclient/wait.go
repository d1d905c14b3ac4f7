package lockclient

import (
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"sync/atomic"
	"time"

	jsonv2 "github.com/go-json-experiment/json"

	"github.com/sharedcontent/sharedcontent/lockserver/api"
)

// Acquire implements Backend for the HTTP API: POST /lock, and when queued,
// wait for the outcome on /lock/subscribe (re-subscribing when the stream
// drops), or by polling /lock/status when streams cannot be used.
func (b *httpBackend) Acquire(ctx context.Context, req api.LockRequest) (api.LockResponse, error) {
	resp, err := b.Lock(ctx, req)
	if err == nil && resp.Queued {
		resp, err = b.wait(ctx, req)
	}
	if err != nil && ctx.Err() != nil {
		// The request may be queued or granted by now: give it back.
		giveBack(ctx, b, req, b.requestTimeout)
		return api.LockResponse{}, ctx.Err()
	}
	return resp, err
}

// streamEnd says how an event stream ended without an outcome.
type streamEnd int

const (
	// streamUnusable: no stream could be opened, or it never delivered the
	// first event (a proxy that blocks or buffers streams).
	streamUnusable streamEnd = iota
	// streamDropped: the stream ended after its first event.
	streamDropped
	// streamForgotten: the coordinator does not know the request (it left
	// the queue with an earlier stream, was refused, or its grant was taken
	// back): send it again.
	streamForgotten
)

// wait follows a queued request until it is acquired or skipped, or fails.
func (b *httpBackend) wait(ctx context.Context, req api.LockRequest) (api.LockResponse, error) {
	drops := 0
	for {
		resp, end, err := b.follow(ctx, req)
		if err != nil || resp.Acquired || resp.Skip {
			return resp, err
		}
		switch end {
		case streamUnusable:
			logger(ctx).Debug("event stream unusable; polling the lock status")
			return b.poll(ctx, req)
		case streamDropped:
			if drops++; drops >= maxStreamDrops {
				logger(ctx).WithField("drops", drops).Info("event streams keep dropping; polling the lock status")
				return b.poll(ctx, req)
			}
			logger(ctx).Debug("event stream dropped; subscribing again")
		case streamForgotten:
			resp, err := b.Lock(ctx, req)
			if err != nil || !resp.Queued {
				return resp, err
			}
		}
	}
}

// follow opens one event stream for req and reads it until an outcome (a
// response that is Acquired or Skip, or an error) or the stream's end.
func (b *httpBackend) follow(ctx context.Context, req api.LockRequest) (api.LockResponse, streamEnd, error) {
	// The stream has its own context so that a silent stream can be cut:
	// first after requestTimeout, then after streamIdleTimeout.
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var silent atomic.Bool
	watchdog := time.AfterFunc(b.requestTimeout, func() { silent.Store(true); cancel() })
	defer watchdog.Stop()

	q := url.Values{"type": {string(req.Type)}, "resource_id": {req.ResourceID}, "node_id": {req.NodeID}, "request_id": {req.RequestID}}
	hreq, err := http.NewRequestWithContext(sctx, http.MethodGet, b.base+"/lock/subscribe?"+q.Encode(), nil)
	if err != nil {
		return api.LockResponse{}, streamUnusable, fmt.Errorf("lockclient: %w", err)
	}
	hreq.Header.Set("Accept", "text/event-stream")
	hreq.Header.Set("Cache-Control", "no-cache")
	b.authorize(hreq)
	resp, err := b.long.Do(hreq)
	if err != nil {
		if ctx.Err() != nil {
			return api.LockResponse{}, 0, ctx.Err()
		}
		logger(ctx).WithError(err).Debug("subscribe failed")
		return api.LockResponse{}, streamUnusable, nil
	}
	defer resp.Body.Close()
	if ct, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); resp.StatusCode != http.StatusOK || ct != "text/event-stream" {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10))
		logger(ctx).WithField("status", resp.StatusCode).WithField("content_type", ct).Debug("subscribe refused")
		return api.LockResponse{}, streamUnusable, nil
	}

	events := newSSEReader(resp.Body)
	defer events.close()
	// outcome returns the request's outcome after reading the rest of the
	// stream, which the server ends after it.
	outcome := func(r api.LockResponse, end streamEnd, err error) (api.LockResponse, streamEnd, error) {
		watchdog.Reset(streamEndTimeout)
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxEventBytes))
		return r, end, err
	}
	first := true
	for {
		ev, err := events.next()
		if err != nil {
			switch {
			case ctx.Err() != nil:
				return api.LockResponse{}, 0, ctx.Err()
			case first:
				logger(ctx).WithError(err).WithField("timed_out", silent.Load()).Debug("event stream ended before its first event")
				return api.LockResponse{}, streamUnusable, nil
			}
			return api.LockResponse{}, streamDropped, nil
		}
		watchdog.Reset(streamIdleTimeout)
		if ev.comment {
			continue
		}
		if first {
			first = false
			if ev.name != api.EventState {
				return api.LockResponse{}, streamUnusable, nil
			}
			// Only the request's own state matters here, not the queue.
			var st struct {
				Request *api.LockResponse `json:"request"`
			}
			if err := jsonv2.Unmarshal(ev.data, &st); err != nil || st.Request == nil {
				return api.LockResponse{}, streamUnusable, nil
			}
			switch r := st.Request; {
			case r.Acquired || r.Skip:
				return outcome(*r, 0, nil)
			case r.Queued:
				if b.onQueued != nil {
					b.onQueued(req)
				}
			default:
				return outcome(api.LockResponse{}, streamForgotten, nil)
			}
			continue
		}
		var e api.Event
		if err := jsonv2.Unmarshal(ev.data, &e); err != nil {
			return api.LockResponse{}, streamDropped, nil
		}
		if e.RequestID != "" && e.RequestID != req.RequestID {
			continue
		}
		switch ev.name {
		case api.EventGranted:
			if e.Lease != nil {
				return outcome(*e.Lease, 0, nil)
			}
		case api.EventCompleted:
			return outcome(api.LockResponse{RequestID: req.RequestID, Skip: true}, 0, nil)
		case api.EventError:
			if e.Error == nil {
				e.Error = &api.ErrorResponse{Error: "refused without a reason", Code: api.CodeInternal}
			}
			return outcome(api.LockResponse{}, 0, api.FromResponse(0, *e.Error))
		case api.EventReleased:
			return api.LockResponse{}, streamForgotten, nil
		}
	}
}

// poll follows a queued request by polling /lock/status every
// pollInterval. A poll also keeps the request in its queue (the coordinator
// drops stream-less waiters that stop polling) and claims a grant made to
// it. A failed poll is returned, for the caller to retry.
func (b *httpBackend) poll(ctx context.Context, req api.LockRequest) (api.LockResponse, error) {
	t := time.NewTicker(b.pollInterval)
	defer t.Stop()
	for {
		st, err := b.Status(ctx, req.Type, req.ResourceID, req.NodeID, req.RequestID)
		if err != nil {
			return api.LockResponse{}, err
		}
		switch r := st.Request; {
		case r == nil:
			return api.LockResponse{}, fmt.Errorf("%s:%s: the lock status does not report request %s: %w",
				req.Type, req.ResourceID, req.RequestID, errors.ErrUnsupported)
		case r.Acquired || r.Skip:
			return *r, nil
		case !r.Queued:
			resp, err := b.Lock(ctx, req)
			if err != nil || !resp.Queued {
				return resp, err
			}
		}
		select {
		case <-ctx.Done():
			return api.LockResponse{}, ctx.Err()
		case <-t.C:
		}
	}
}

// giveBack takes req out of its queue, or gives back a grant it got, after
// ctx has ended. Best effort: the coordinator drops a waiter that stops
// listening, and releases an unclaimed grant, by itself.
func giveBack(ctx context.Context, b Backend, req api.LockRequest, timeout time.Duration) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
	defer cancel()
	if err := b.Cancel(cctx, api.CancelRequest{Type: req.Type, ResourceID: req.ResourceID, NodeID: req.NodeID, RequestID: req.RequestID}); err != nil {
		logger(ctx).WithError(err).Warn("cancelling the lock request failed; the coordinator drops it by itself")
	}
}
