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
	f := &follower{b: b, req: req}
	f.watchdog = time.AfterFunc(b.requestTimeout, func() { f.silent.Store(true); cancel() })
	defer f.watchdog.Stop()

	body, end, err := b.subscribe(ctx, sctx, req)
	if body == nil {
		return api.LockResponse{}, end, err
	}
	defer body.Close()
	f.body = body
	f.events = newSSEReader(body)
	defer f.events.close()
	r := f.read(ctx)
	return r.resp, r.end, r.err
}

// subscribe opens req's event stream (GET /lock/subscribe) on sctx and
// returns its body. A stream that cannot be opened or is refused is
// streamUnusable (and no body); the error is ctx's, or a request that
// cannot be built.
func (b *httpBackend) subscribe(ctx, sctx context.Context, req api.LockRequest) (io.ReadCloser, streamEnd, error) {
	q := url.Values{"type": {string(req.Type)}, "resource_id": {req.ResourceID}, "node_id": {req.NodeID}, "request_id": {req.RequestID}}
	hreq, err := http.NewRequestWithContext(sctx, http.MethodGet, b.base+"/lock/subscribe?"+q.Encode(), nil)
	if err != nil {
		return nil, streamUnusable, fmt.Errorf("lockclient: %w", err)
	}
	hreq.Header.Set("Accept", "text/event-stream")
	hreq.Header.Set("Cache-Control", "no-cache")
	b.authorize(hreq)
	resp, err := b.long.Do(hreq)
	if err != nil {
		if ctx.Err() != nil {
			return nil, 0, ctx.Err()
		}
		logger(ctx).WithError(err).Debug("subscribe failed")
		return nil, streamUnusable, nil
	}
	if ct, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); resp.StatusCode != http.StatusOK || ct != "text/event-stream" {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10))
		resp.Body.Close()
		logger(ctx).WithField("status", resp.StatusCode).WithField("content_type", ct).Debug("subscribe refused")
		return nil, streamUnusable, nil
	}
	return resp.Body, 0, nil
}

// followed is what follow returns: the request's outcome (a response or an
// error), or how the stream ended without one.
type followed struct {
	resp api.LockResponse
	end  streamEnd
	err  error
}

// follower reads the event stream of one queued request, for follow. It
// is used by one goroutine, apart from silent.
type follower struct {
	b        *httpBackend
	req      api.LockRequest
	body     io.Reader
	events   *sseReader
	watchdog *time.Timer // cuts the stream when it stays silent
	silent   atomic.Bool // set by the watchdog when it cut the stream
}

// read reads events until the request's outcome or the stream's end.
func (f *follower) read(ctx context.Context) followed {
	first := true
	for {
		ev, err := f.events.next()
		if err != nil {
			switch {
			case ctx.Err() != nil:
				return followed{err: ctx.Err()}
			case first:
				logger(ctx).WithError(err).WithField("timed_out", f.silent.Load()).Debug("event stream ended before its first event")
				return followed{end: streamUnusable}
			}
			return followed{end: streamDropped}
		}
		f.watchdog.Reset(streamIdleTimeout)
		if ev.comment {
			continue
		}
		var r followed
		var done bool
		if first {
			first = false
			r, done = f.state(ev)
		} else {
			r, done = f.event(ev)
		}
		if done {
			return r
		}
	}
}

// state reads the stream's first event, the request's state: done with
// its outcome when it is already decided, not done while it is queued.
func (f *follower) state(ev sseEvent) (followed, bool) {
	if ev.name != api.EventState {
		return followed{end: streamUnusable}, true
	}
	// Only the request's own state matters here, not the queue.
	var st struct {
		Request *api.LockResponse `json:"request"`
	}
	if err := jsonv2.Unmarshal(ev.data, &st); err != nil || st.Request == nil {
		return followed{end: streamUnusable}, true
	}
	switch r := st.Request; {
	case r.Acquired || r.Skip:
		return f.outcome(followed{resp: *r})
	case r.Queued:
		if f.b.onQueued != nil {
			f.b.onQueued(f.req)
		}
		return followed{}, false
	default:
		return f.outcome(followed{end: streamForgotten})
	}
}

// event reads a later event: done when it decides the request (or drops
// it from the queue), not done for other requests' events.
func (f *follower) event(ev sseEvent) (followed, bool) {
	var e api.Event
	if err := jsonv2.Unmarshal(ev.data, &e); err != nil {
		return followed{end: streamDropped}, true
	}
	if e.RequestID != "" && e.RequestID != f.req.RequestID {
		return followed{}, false
	}
	switch ev.name {
	case api.EventGranted:
		if e.Lease != nil {
			return f.outcome(followed{resp: *e.Lease})
		}
	case api.EventCompleted:
		return f.outcome(followed{resp: api.LockResponse{RequestID: f.req.RequestID, Skip: true}})
	case api.EventError:
		if e.Error == nil {
			e.Error = &api.ErrorResponse{Error: "refused without a reason", Code: api.CodeInternal}
		}
		return f.outcome(followed{err: api.FromResponse(0, *e.Error)})
	case api.EventReleased:
		return followed{end: streamForgotten}, true
	}
	return followed{}, false
}

// outcome returns the request's outcome r after reading the rest of the
// stream, which the server ends after it.
func (f *follower) outcome(r followed) (followed, bool) {
	f.watchdog.Reset(streamEndTimeout)
	_, _ = io.Copy(io.Discard, io.LimitReader(f.body, maxEventBytes))
	return r, true
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
