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

// Acquire implements Transport for the HTTP API: POST /lock, and when
// queued, watch for the outcome on the node's event stream (/lock/events,
// nodestream.go), else on /lock/subscribe (re-subscribing when the stream
// drops), or poll /lock/status when streams cannot be used.
func (tr *httpTransport) Acquire(ctx context.Context, req api.LockRequest) (api.LockResponse, error) {
	w := tr.expect(req)
	resp, err := tr.Lock(ctx, req)
	if err == nil && resp.Queued {
		resp, err = tr.wait(ctx, req, w)
	} else {
		w.forget()
	}
	if err != nil && ctx.Err() != nil {
		// The request may be queued or granted by now: give it back.
		giveBack(ctx, tr, req, tr.requestTimeout)
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

// wait watches a queued request until it is acquired or skipped, or fails:
// on the node's one event stream, or when that cannot be had on a stream of
// its own, or by polling.
func (tr *httpTransport) wait(ctx context.Context, req api.LockRequest, w *nodeWait) (api.LockResponse, error) {
	if resp, ok, err := tr.waitOn(ctx, req, w); ok {
		return resp, err
	}
	drops := 0
	for {
		resp, end, err := tr.watchStream(ctx, req)
		if err != nil || resp.Acquired || resp.Skip {
			return resp, err
		}
		switch end {
		case streamUnusable:
			logger(ctx).Debug("event stream unusable; polling the lock status")
			return tr.poll(ctx, req)
		case streamDropped:
			if drops++; drops >= maxStreamDrops {
				logger(ctx).WithField("drops", drops).Info("event streams keep dropping; polling the lock status")
				return tr.poll(ctx, req)
			}
			logger(ctx).Debug("event stream dropped; subscribing again")
		case streamForgotten:
			resp, err := tr.Lock(ctx, req)
			if err != nil || !resp.Queued {
				return resp, err
			}
		}
	}
}

// watchStream opens one event stream for req and reads it until an outcome
// (a response that is Acquired or Skip, or an error) or the stream's end.
func (tr *httpTransport) watchStream(ctx context.Context, req api.LockRequest) (api.LockResponse, streamEnd, error) {
	// The stream has its own context so that a silent stream can be cut:
	// first after requestTimeout, then after streamIdleTimeout.
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w := &watch{tr: tr, req: req}
	w.watchdog = time.AfterFunc(tr.requestTimeout, func() { w.silent.Store(true); cancel() })
	defer w.watchdog.Stop()

	body, end, err := tr.subscribe(ctx, sctx, req)
	if body == nil {
		return api.LockResponse{}, end, err
	}
	defer body.Close()
	w.body = body
	w.events = newSSEReader(body)
	defer w.events.close()
	r := w.read(ctx)
	return r.resp, r.end, r.err
}

// subscribe opens req's event stream (GET /lock/subscribe) on sctx and
// returns its body. A stream that cannot be opened or is refused is
// streamUnusable (and no body); the error is ctx's, or a request that
// cannot be built.
func (tr *httpTransport) subscribe(ctx, sctx context.Context, req api.LockRequest) (io.ReadCloser, streamEnd, error) {
	q := url.Values{"type": {string(req.Type)}, "resource_id": {req.ResourceID}, "node_id": {req.NodeID}, "request_id": {req.RequestID}}
	body, err := tr.openStream(sctx, "/lock/subscribe?"+q.Encode())
	switch {
	case body != nil:
		return body, 0, nil
	case ctx.Err() != nil:
		return nil, 0, ctx.Err()
	case errors.Is(err, errBadStreamRequest):
		return nil, streamUnusable, err
	}
	logger(ctx).WithError(err).Debug("subscribe failed")
	return nil, streamUnusable, nil
}

// errBadStreamRequest: a stream's request could not be built.
var errBadStreamRequest = errors.New("lockclient: bad event stream request")

// openStream sends GET target (a path and query) for an event stream on
// sctx and returns its body, or nil and why: it could not be sent, or was
// answered with something other than a stream. Like a short request, it
// follows a not_leader hint to the leader at once (replicas.go).
func (tr *httpTransport) openStream(sctx context.Context, target string) (io.ReadCloser, error) {
	return onLeader(sctx, tr, func(r *replica) (io.ReadCloser, error) { return tr.openStreamOn(sctx, r, target) })
}

// openStreamOn is openStream on replica r.
func (tr *httpTransport) openStreamOn(sctx context.Context, r *replica, target string) (io.ReadCloser, error) {
	hreq, err := http.NewRequestWithContext(sctx, http.MethodGet, r.base+target, nil)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errBadStreamRequest, err)
	}
	hreq.Header.Set("Accept", "text/event-stream")
	hreq.Header.Set("Cache-Control", "no-cache")
	tr.authorize(hreq)
	resp, err := tr.long.Do(hreq)
	if err != nil {
		return nil, err
	}
	if ct, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); resp.StatusCode != http.StatusOK || ct != "text/event-stream" {
		data, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10))
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return nil, fmt.Errorf("event stream refused: %w", responseError(resp.StatusCode, data))
		}
		return nil, fmt.Errorf("event stream refused: status %d, content type %q", resp.StatusCode, ct)
	}
	return resp.Body, nil
}

// watchResult is what watchStream returns: the request's outcome (a
// response or an error), or how the stream ended without one.
type watchResult struct {
	resp api.LockResponse
	end  streamEnd
	err  error
}

// watch reads the event stream of one queued request, for watchStream. It
// is used by one goroutine, apart from silent.
type watch struct {
	tr       *httpTransport
	req      api.LockRequest
	body     io.Reader
	events   *sseReader
	watchdog *time.Timer // cuts the stream when it stays silent
	silent   atomic.Bool // set by the watchdog when it cut the stream
}

// read reads events until the request's outcome or the stream's end.
func (w *watch) read(ctx context.Context) watchResult {
	first := true
	for {
		ev, err := w.events.next()
		if err != nil {
			switch {
			case ctx.Err() != nil:
				return watchResult{err: ctx.Err()}
			case first:
				logger(ctx).WithError(err).WithField("timed_out", w.silent.Load()).Debug("event stream ended before its first event")
				return watchResult{end: streamUnusable}
			}
			return watchResult{end: streamDropped}
		}
		w.watchdog.Reset(streamIdleTimeout)
		if ev.comment {
			continue
		}
		var r watchResult
		var done bool
		if first {
			first = false
			r, done = w.state(ev)
		} else {
			r, done = w.event(ev)
		}
		if done {
			return r
		}
	}
}

// state reads the stream's first event, the request's state: done with
// its outcome when it is already decided, not done while it is queued.
func (w *watch) state(ev sseEvent) (watchResult, bool) {
	if ev.name != api.EventState {
		return watchResult{end: streamUnusable}, true
	}
	// Only the request's own state matters here, not the queue.
	var st struct {
		Request *api.LockResponse `json:"request"`
	}
	if err := jsonv2.Unmarshal(ev.data, &st); err != nil || st.Request == nil {
		return watchResult{end: streamUnusable}, true
	}
	switch r := st.Request; {
	case r.Acquired || r.Skip:
		return w.outcome(watchResult{resp: *r})
	case r.Queued:
		if w.tr.onQueued != nil {
			w.tr.onQueued(w.req)
		}
		return watchResult{}, false
	default:
		return w.outcome(watchResult{end: streamForgotten})
	}
}

// event reads a later event: done when it decides the request (or drops
// it from the queue), not done for other requests' events.
func (w *watch) event(ev sseEvent) (watchResult, bool) {
	var e api.Event
	if err := jsonv2.Unmarshal(ev.data, &e); err != nil {
		return watchResult{end: streamDropped}, true
	}
	if e.RequestID != "" && e.RequestID != w.req.RequestID {
		return watchResult{}, false
	}
	switch r, ok := eventResult(ev.name, e, w.req.RequestID); {
	case !ok:
		return watchResult{}, false
	case r.end == streamForgotten:
		return r, true
	default:
		return w.outcome(r)
	}
}

// eventResult is what event name (e) decides for the request requestID:
// its outcome (a grant, a skip or an error), or streamForgotten when its
// grant was taken back. False when it decides nothing.
func eventResult(name string, e api.Event, requestID string) (watchResult, bool) {
	switch name {
	case api.EventGranted:
		if e.Lease != nil {
			return watchResult{resp: *e.Lease}, true
		}
	case api.EventCompleted:
		return watchResult{resp: api.LockResponse{RequestID: requestID, Skip: true, RefAdded: e.RefAdded}}, true
	case api.EventError:
		if e.Error == nil {
			e.Error = &api.ErrorResponse{Error: "refused without a reason", Code: api.CodeInternal}
		}
		return watchResult{err: api.FromResponse(0, *e.Error)}, true
	case api.EventReleased:
		return watchResult{end: streamForgotten}, true
	}
	return watchResult{}, false
}

// outcome returns the request's outcome r after reading the rest of the
// stream, which the coordinator ends after it.
func (w *watch) outcome(r watchResult) (watchResult, bool) {
	w.watchdog.Reset(streamEndTimeout)
	_, _ = io.Copy(io.Discard, io.LimitReader(w.body, maxEventBytes))
	return r, true
}

// poll watches a queued request by polling /lock/status every
// pollInterval. A poll also keeps the request in its queue (the coordinator
// drops stream-less waiters that stop polling) and claims a grant made to
// it. A failed poll is returned, for the caller to retry.
func (tr *httpTransport) poll(ctx context.Context, req api.LockRequest) (api.LockResponse, error) {
	t := time.NewTicker(tr.pollInterval)
	defer t.Stop()
	told := false // onQueued was called
	for {
		st, err := tr.Status(ctx, req.Type, req.ResourceID, req.NodeID, req.RequestID)
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
			resp, err := tr.Lock(ctx, req)
			if err != nil || !resp.Queued {
				return resp, err
			}
		case !told && tr.onQueued != nil:
			told = true
			tr.onQueued(req)
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
func giveBack(ctx context.Context, tr Transport, req api.LockRequest, timeout time.Duration) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
	defer cancel()
	if err := tr.Cancel(cctx, api.CancelRequest{Type: req.Type, ResourceID: req.ResourceID, NodeID: req.NodeID, RequestID: req.RequestID}); err != nil {
		logger(ctx).WithError(err).Warn("cancelling the lock request failed; the coordinator drops it by itself")
	}
}
