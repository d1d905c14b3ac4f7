package lockclient

import (
	"context"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	jsonv2 "github.com/go-json-experiment/json"

	"github.com/sharedcontent/sharedcontent/lockserver/api"
)

const (
	// nodeStreamLinger keeps a node's event stream open this long after
	// its last wait ended, so that the next wait needs no new connection.
	nodeStreamLinger = 30 * time.Second
	// nodeStreamRetry is how long a node's waits use a stream each
	// (/lock/subscribe) after its node stream was refused or is not
	// served (an older coordinator).
	nodeStreamRetry = 30 * time.Second
)

// nodeStream is a node's one event stream, GET /lock/events (docs/design.md
// §10.1): all the node's waits share it. It is opened with the first wait
// and closed nodeStreamLinger after the last; or, WithSessionStream, opened
// with the node's session and kept while the session is (hold,
// docs/design.md §10.6), so that a wait finds it live.
// When it drops, it is opened again and every wait checks its request with
// /lock/status once it is back, so a grant made while it was down is found
// (the coordinator keeps it for its claim timeout). When it cannot be had,
// the waits fall back to a stream each, then to polling (wait.go).
type nodeStream struct {
	tr   *httpTransport
	node string

	mu      sync.Mutex
	waits   map[string]*nodeWait // by request ID; protected by mu
	live    bool                 // the stream has delivered its first event; protected by mu
	running bool                 // run's goroutine runs; protected by mu
	closed  bool                 // protected by mu
	held    bool                 // kept open for the node's session (hold); protected by mu
	cancel  context.CancelFunc   // ends the stream being read; protected by mu
	linger  *time.Timer          // closes the stream once no wait is left; protected by mu
	// refusedUntil: until then, waits do not use the node stream.
	refusedUntil time.Time     // protected by mu
	done         chan struct{} // closed when run returns; protected by mu
}

// nodeWait is one wait on a node stream. Its fields but signal are
// protected by the nodeStream's mu.
type nodeWait struct {
	ns     *nodeStream
	req    api.LockRequest
	signal chan struct{} // one slot: something below changed
	// result is the request's outcome, from an event.
	result *watchResult
	// check: the stream is (back) up: ask /lock/status for what may have
	// happened while it was not.
	check bool
	// gone: the node stream cannot be had; fall back.
	gone bool
}

func (w *nodeWait) notify() {
	select {
	case w.signal <- struct{}{}:
	default:
	}
}

// nodeStreamFor returns the node stream of node, creating it.
func (tr *httpTransport) nodeStreamFor(node string) *nodeStream {
	tr.nodeStreamsMu.Lock()
	defer tr.nodeStreamsMu.Unlock()
	if tr.nodeStreams == nil {
		tr.nodeStreams = map[string]*nodeStream{}
	}
	ns := tr.nodeStreams[node]
	if ns == nil {
		// After closeNodeStreams, a closed one that opens nothing.
		ns = &nodeStream{tr: tr, node: node, waits: map[string]*nodeWait{}, closed: tr.nodeStreamsClosed}
		if !tr.nodeStreamsClosed {
			tr.nodeStreams[node] = ns
		}
	}
	return ns
}

// holdNodeStream opens node's stream with its session and keeps it
// (nodeStream.hold); releaseNodeStream ends that when the session ends.
func (tr *httpTransport) holdNodeStream(node string) {
	if node != "" && !tr.perRequestStreams {
		tr.nodeStreamFor(node).hold()
	}
}

func (tr *httpTransport) releaseNodeStream(node string) {
	if node != "" && !tr.perRequestStreams {
		tr.nodeStreamFor(node).release()
	}
}

// closeNodeStreams ends every node stream and waits for their goroutines.
func (tr *httpTransport) closeNodeStreams() {
	tr.nodeStreamsMu.Lock()
	streams := tr.nodeStreams
	tr.nodeStreams, tr.nodeStreamsClosed = nil, true
	tr.nodeStreamsMu.Unlock()
	for _, ns := range streams {
		ns.close()
	}
}

// expect registers req on its node's stream before it is sent, when that
// stream is up: its outcome is then caught even if it comes before the
// answer to /lock, without asking /lock/status. The caller passes the wait
// to waitOn, or to forget when req is not queued. Nil when there is no
// live node stream.
func (tr *httpTransport) expect(req api.LockRequest) *nodeWait {
	if req.NodeID == "" || tr.perRequestStreams {
		return nil
	}
	ns := tr.nodeStreamFor(req.NodeID)
	ns.mu.Lock()
	defer ns.mu.Unlock()
	if !ns.live || ns.closed {
		return nil
	}
	w := &nodeWait{ns: ns, req: req, signal: make(chan struct{}, 1)}
	ns.waits[req.RequestID] = w
	if ns.linger != nil {
		ns.linger.Stop()
	}
	return w
}

// forget unregisters w (nil: nothing to do).
func (w *nodeWait) forget() {
	if w != nil {
		w.ns.remove(w)
	}
}

// waitOn waits for req's outcome on its node's stream, on w if expect gave
// one. It returns false when the node stream cannot be had: the caller
// then waits as before.
func (tr *httpTransport) waitOn(ctx context.Context, req api.LockRequest, w *nodeWait) (api.LockResponse, bool, error) {
	if req.NodeID == "" || tr.perRequestStreams {
		return api.LockResponse{}, false, nil
	}
	if w == nil {
		w = tr.nodeStreamFor(req.NodeID).add(req)
	} else if tr.onQueued != nil {
		tr.onQueued(req) // the stream was up before req was queued
	}
	if w == nil {
		return api.LockResponse{}, false, nil
	}
	ns := w.ns
	defer ns.remove(w)
	for {
		select {
		case <-ctx.Done():
			return api.LockResponse{}, true, ctx.Err()
		case <-w.signal:
		}
		ns.mu.Lock()
		result, check, gone := w.result, w.check, w.gone
		w.result, w.check = nil, false
		ns.mu.Unlock()
		switch {
		case result != nil && result.end != streamForgotten:
			return result.resp, true, result.err
		case result != nil:
			check = true // a grant taken back: see where the request is
		case gone:
			return api.LockResponse{}, false, nil
		}
		if !check {
			continue
		}
		st, err := tr.Status(ctx, req.Type, req.ResourceID, req.NodeID, req.RequestID)
		if err != nil {
			return api.LockResponse{}, true, err
		}
		switch r := st.Request; {
		case r == nil: // a coordinator that does not report requests
			return api.LockResponse{}, false, nil
		case r.Acquired || r.Skip:
			return *r, true, nil
		case r.Queued:
			if tr.onQueued != nil {
				tr.onQueued(req)
			}
		default:
			// Forgotten (refused, or its grant taken back): send it again;
			// while it waits, this wait stays on the stream.
			resp, err := tr.Lock(ctx, req)
			if err != nil || !resp.Queued {
				return resp, true, err
			}
		}
	}
}

// add registers a wait for req and opens the stream if needed; nil when
// the node stream was refused lately or the transport is closed.
func (ns *nodeStream) add(req api.LockRequest) *nodeWait {
	ns.mu.Lock()
	defer ns.mu.Unlock()
	if ns.closed || time.Now().Before(ns.refusedUntil) {
		return nil
	}
	w := &nodeWait{ns: ns, req: req, signal: make(chan struct{}, 1)}
	ns.waits[req.RequestID] = w
	if ns.linger != nil {
		ns.linger.Stop()
	}
	if ns.live {
		// Events of req may have gone by before it was registered.
		w.check = true
		w.notify()
	}
	ns.start()
	return w
}

// start runs the stream's goroutine unless it runs. Callers hold mu.
func (ns *nodeStream) start() {
	if !ns.running {
		ns.running = true
		ns.done = make(chan struct{})
		go ns.run(ns.done)
	}
}

// hold opens the stream, if it is not open, and keeps it open without a
// wait (docs/design.md §10.6): the node's session holds it, so that the
// node's first wait of a burst finds it live rather than learning its
// outcome by /lock/status after opening it. A stream refused lately is
// not opened; the next session call tries again.
func (ns *nodeStream) hold() {
	ns.mu.Lock()
	defer ns.mu.Unlock()
	if ns.closed || time.Now().Before(ns.refusedUntil) {
		return
	}
	ns.held = true
	if ns.linger != nil {
		ns.linger.Stop()
	}
	ns.start()
}

// release ends hold: the stream is closed now if no wait is left.
func (ns *nodeStream) release() {
	ns.mu.Lock()
	defer ns.mu.Unlock()
	ns.held = false
	if len(ns.waits) == 0 && ns.cancel != nil {
		ns.cancel()
	}
}

// remove unregisters w; the stream is closed nodeStreamLinger after the
// last wait.
func (ns *nodeStream) remove(w *nodeWait) {
	ns.mu.Lock()
	defer ns.mu.Unlock()
	if ns.waits[w.req.RequestID] == w {
		delete(ns.waits, w.req.RequestID)
	}
	if len(ns.waits) > 0 || ns.cancel == nil || ns.held {
		return
	}
	if ns.linger == nil {
		ns.linger = time.AfterFunc(nodeStreamLinger, ns.idle)
	} else {
		ns.linger.Reset(nodeStreamLinger)
	}
}

// idle ends the stream if no wait is left.
func (ns *nodeStream) idle() {
	ns.mu.Lock()
	defer ns.mu.Unlock()
	if len(ns.waits) == 0 && !ns.held && ns.cancel != nil {
		ns.cancel()
	}
}

// close ends the stream for good and waits for its goroutine.
func (ns *nodeStream) close() {
	ns.mu.Lock()
	ns.closed = true
	if ns.cancel != nil {
		ns.cancel()
	}
	if ns.linger != nil {
		ns.linger.Stop()
	}
	done := ns.done
	ns.mu.Unlock()
	if done != nil {
		<-done
	}
}

// run opens the stream and reads it, again when it drops, while waits are
// left or the session holds it.
func (ns *nodeStream) run(done chan struct{}) {
	defer close(done)
	drops := 0
	for {
		ctx, cancel := context.WithCancel(context.Background())
		ns.mu.Lock()
		if ns.closed || (len(ns.waits) == 0 && !ns.held) {
			ns.running, ns.cancel = false, nil
			ns.mu.Unlock()
			cancel()
			return
		}
		ns.cancel = cancel
		ns.mu.Unlock()

		live, events := ns.read(ctx)
		ended := ctx.Err() != nil // closed here: idle, or the transport closed
		cancel()
		switch {
		case events:
			drops = 1
		case live:
			drops++
		}
		ns.mu.Lock()
		ns.live, ns.cancel = false, nil
		if !ended && (!live || drops >= maxStreamDrops) {
			// Refused, not served, or dropping again and again: the
			// waits fall back to a stream each, then to polling; the
			// session holds it again after nodeStreamRetry.
			ns.refusedUntil = time.Now().Add(nodeStreamRetry)
			ns.held = false
			for _, w := range ns.waits {
				w.gone = true
				w.notify()
			}
			clear(ns.waits)
		}
		ns.mu.Unlock()
	}
}

// read opens the stream and dispatches its events to the waits until it
// ends. live says it delivered its first event; events, that it carried
// an outcome.
func (ns *nodeStream) read(ctx context.Context) (live, events bool) {
	tr := ns.tr
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var silent atomic.Bool
	watchdog := time.AfterFunc(tr.requestTimeout, func() { silent.Store(true); cancel() })
	defer watchdog.Stop()

	body, err := tr.openStream(sctx, "/lock/events?"+url.Values{"node_id": {ns.node}}.Encode())
	if body == nil {
		logger(ctx).WithError(err).Debug("node event stream: not opened")
		return false, false
	}
	defer body.Close()
	r := newSSEReader(body)
	defer r.close()
	for {
		ev, err := r.next()
		if err != nil {
			logger(ctx).WithError(err).WithField("timed_out", silent.Load()).Debug("node event stream ended")
			return live, events
		}
		watchdog.Reset(streamIdleTimeout)
		switch {
		case ev.comment:
		case !live:
			if ev.name != api.EventState {
				return false, false
			}
			live = true
			ns.up()
		default:
			if ns.dispatch(ev) {
				events = true
			}
		}
	}
}

// up marks the stream live and has every wait check its request.
func (ns *nodeStream) up() {
	ns.mu.Lock()
	defer ns.mu.Unlock()
	ns.live = true
	for _, w := range ns.waits {
		w.check = true
		w.notify()
	}
}

// dispatch hands an event to the wait of its request; true if one took it.
func (ns *nodeStream) dispatch(ev sseEvent) bool {
	var e api.Event
	if err := jsonv2.Unmarshal(ev.data, &e); err != nil || e.RequestID == "" {
		return false
	}
	r, ok := eventResult(ev.name, e, e.RequestID)
	if !ok {
		return false
	}
	ns.mu.Lock()
	defer ns.mu.Unlock()
	w := ns.waits[e.RequestID]
	if w == nil || w.req.Type != e.Type || w.req.ResourceID != e.ResourceID {
		return false
	}
	w.result = &r
	w.notify()
	return true
}
