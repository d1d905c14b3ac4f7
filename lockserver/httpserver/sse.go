package httpserver

import (
	"encoding/json"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/containerd/log"
	"github.com/valyala/fasthttp"

	"github.com/sharedcontent/sharedcontent/lockserver"
	"github.com/sharedcontent/sharedcontent/lockserver/api"
)

const (
	// sseHeartbeat is how often an idle stream gets a comment line, so
	// that proxies and load balancers do not close it.
	sseHeartbeat = 15 * time.Second
	// sseWriteTimeout bounds one write of a stream: a client that stops
	// reading for that long is dropped (a waiter leaves its queue).
	sseWriteTimeout = 2 * sseHeartbeat
	// watchIdle ends a stream that watches a key (no request_id) after
	// this long without an event; a watcher that still cares subscribes
	// again. A stream that follows a request lasts while the request
	// waits: the stream limits bound those.
	watchIdle = 10 * time.Minute
)

var (
	sseKeepalive = []byte(": keepalive\n\n")
	// lastChunk ends a chunked body (no trailer).
	lastChunk = []byte("0\r\n\r\n")
)

// subscribe serves GET /lock/subscribe as Server-Sent Events: first the
// current state ("state"), then the events of the key or request. A waiter
// whose stream closes leaves its queue.
//
// The stream writes its response itself, on the connection taken over
// from fasthttp: fasthttp flushes each chunk of a streamed body and then
// the end of the body separately, so a waiter's outcome and the end of its
// stream would leave in two writes; here they leave in one. Once the
// stream is over, the connection goes back to the Handler's server for the
// client's next request.
func (h *Handler) subscribe(ctx *fasthttp.RequestCtx) {
	if !h.streamRequest(ctx) {
		return
	}
	lost, leads := h.leadingStream(ctx)
	if !leads {
		return
	}
	q := ctx.QueryArgs()
	node := string(q.Peek("node_id"))
	if !actAs(ctx, &node) {
		return
	}
	release, err := h.streams.acquire(ctx.RemoteIP().String(), node, streamOfRequest)
	if err != nil {
		ctx.Response.Header.Set("Retry-After", "1")
		writeError(ctx, err)
		return
	}
	sub, err := h.coord().Subscribe(api.OperationType(q.Peek("type")), string(q.Peek("resource_id")), node, string(q.Peek("request_id")))
	if err != nil {
		release()
		writeError(ctx, err)
		return
	}
	s := &eventStream{sub: sub, done: h.streamsDone, lost: lost, keepAlive: !ctx.Request.Header.ConnectionClose(), idle: h.http.IdleTimeout}
	if err := s.add(api.EventState, sub.First); err != nil {
		release()
		sub.Close()
		writeError(ctx, err)
		return
	}
	h.startStream(ctx, s, release)
}

// nodeEvents serves GET /lock/events?node_id=, the node's one event stream
// (docs/design.md §10.1): first "state" (an
// api.NodeStreamState), then the outcome of each of the node's queued
// requests that has no stream of its own, as they happen. It lasts until
// the client closes it, a newer stream of the node replaces it, or the
// server drains.
func (h *Handler) nodeEvents(ctx *fasthttp.RequestCtx) {
	if !h.streamRequest(ctx) {
		return
	}
	lost, leads := h.leadingStream(ctx)
	if !leads {
		return
	}
	node := string(ctx.QueryArgs().Peek("node_id"))
	if !actAs(ctx, &node) {
		return
	}
	if node == "" {
		writeError(ctx, fmt.Errorf("node_id is required: %w", api.ErrInvalidArgument))
		return
	}
	release, err := h.streams.acquire(ctx.RemoteIP().String(), node, streamOfNode)
	if err != nil {
		ctx.Response.Header.Set("Retry-After", "1")
		writeError(ctx, err)
		return
	}
	ns, err := h.coord().OpenNodeStream(node)
	if err != nil {
		release()
		writeError(ctx, err)
		return
	}
	s := &eventStream{node: ns, done: h.streamsDone, lost: lost, keepAlive: !ctx.Request.Header.ConnectionClose(), idle: h.http.IdleTimeout}
	if err := s.add(api.EventState, api.NodeStreamState{NodeID: node, Limits: h.streams.limits()}); err != nil {
		release()
		ns.Close()
		writeError(ctx, err)
		return
	}
	h.startStream(ctx, s, release)
}

// streamRequest checks what every event stream needs of its request: HTTP/1.1
// and no body. It answers the request when it returns false.
func (h *Handler) streamRequest(ctx *fasthttp.RequestCtx) bool {
	if !ctx.Request.Header.IsHTTP11() {
		writeError(ctx, fmt.Errorf("event streams need HTTP/1.1: %w", api.ErrInvalidArgument))
		return false
	}
	if n := ctx.Request.Header.ContentLength(); n > 0 || n == -1 { // -1: chunked
		// The stream takes the connection over where the request ends:
		// a body (perhaps still arriving) would be read as the next
		// request.
		writeError(ctx, fmt.Errorf("a subscription has no body: %w", api.ErrInvalidArgument))
		ctx.SetConnectionClose()
		return false
	}
	return true
}

// startStream sends the head of s's response and takes the connection
// over to write its events.
func (h *Handler) startStream(ctx *fasthttp.RequestCtx, s *eventStream, release func()) {
	hdr := &ctx.Response.Header
	hdr.SetContentType("text/event-stream")
	hdr.Set("Cache-Control", "no-cache")
	hdr.Set("X-Accel-Buffering", "no")
	hdr.SetContentLength(-1) // chunked
	if !s.keepAlive {
		hdr.SetConnectionClose()
	}
	s.out = hdr.AppendBytes(s.out)
	ctx.HijackSetNoResponse(true)
	ctx.Hijack(func(c net.Conn) { h.serveStream(c, s, release) })
}

// serveStream writes the event stream on a hijacked connection, then
// serves the client's next requests on it.
func (h *Handler) serveStream(hijacked net.Conn, s *eventStream, release func()) {
	s.rbuf = make([]byte, 512)
	conn, ahead := takeOver(hijacked, s.rbuf)
	s.conn = conn
	next, ok := s.run(ahead)
	release()
	// The server sets no write deadline of its own: lift the stream's.
	if !ok || h.draining.Load() || conn.SetWriteDeadline(time.Time{}) != nil {
		_ = conn.Close()
		return
	}
	if err := h.http.ServeConn(resume(conn, next)); err != nil {
		log.L.WithError(err).Debug("http: serving a connection after its event stream")
	}
}

// eventStream is one /lock/subscribe or /lock/events response, written as
// a chunked body. All methods run on the stream's goroutine but watch's.
type eventStream struct {
	// One of sub (/lock/subscribe) and node (/lock/events) is set.
	sub       *lockserver.Subscription
	node      *lockserver.NodeStream
	batch     []api.Event     // node's events being taken
	done      <-chan struct{} // Handler.streamsDone
	lost      <-chan struct{} // closed when the replica stops leading (leadership.go)
	keepAlive bool            // the connection carries requests after the stream
	idle      time.Duration   // how long it waits for the next one
	conn      net.Conn
	heartbeat *time.Ticker
	lastEvent time.Time // of a watcher: when it last got an event

	// events is the text of the events not yet written; out is the next
	// write (the response head, then chunks).
	events []byte
	out    []byte
	// claims are the grants in events: once written, they have left for
	// their holders.
	claims []api.Event
	// ended says the subscription has ended: the next write ends the
	// body.
	ended bool

	// read gets what the watcher read (into rbuf) from the connection:
	// the start of the client's next request, or nothing when the client
	// closed it.
	read chan []byte
	rbuf []byte
}

// run writes the response until the stream is over, then waits for the
// client's next request. It returns that request's first bytes (after
// ahead, what the server had read already), or false when the connection
// cannot carry it: the client went, the server drains, or writing failed.
func (s *eventStream) run(ahead []byte) ([]byte, bool) {
	s.heartbeat = time.NewTicker(sseHeartbeat)
	defer s.heartbeat.Stop()
	s.lastEvent = time.Now()
	s.read = make(chan []byte, 1)
	go s.watch()

	next, watching := ahead, s.read
	s.collect()
	for {
		if err := s.write(); err != nil {
			s.closeSource()
			return nil, false
		}
		if s.ended {
			break
		}
		select {
		case ev, ok := <-s.subEvents():
			s.take(ev, ok)
			s.collect()
		case <-s.nodeReady():
			s.takeNode()
		case now := <-s.heartbeat.C:
			if s.watchesKey() && now.Sub(s.lastEvent) >= watchIdle {
				s.sub.Close() // ends the body at the next write
				s.ended = true
				break
			}
			s.events = append(s.events, sseKeepalive...)
		case b := <-watching:
			if len(b) == 0 {
				s.closeSource() // the client went
				return nil, false
			}
			// A client that pipelines: its next request waits for
			// the end of this response.
			next, watching = join(next, b), nil
		case <-s.done:
			return s.cut()
		case <-s.lost:
			return s.cut() // a standby now: the client reconnects, to the leader
		}
	}
	if !s.keepAlive {
		return nil, false
	}
	if watching == nil {
		return next, true
	}
	if len(next) > 0 {
		// The server had read the next request already: stop the
		// watcher (a read deadline in the past) and serve it.
		if s.conn.SetReadDeadline(aLongTimeAgo) != nil {
			return nil, false
		}
		b := <-watching
		return join(next, b), s.conn.SetReadDeadline(time.Time{}) == nil
	}
	// Wait for the next request as the server waits on an idle
	// keep-alive connection.
	var idle <-chan time.Time
	if s.idle > 0 {
		s.heartbeat.Reset(s.idle)
		idle = s.heartbeat.C
	}
	select {
	case b := <-watching:
		return join(next, b), len(b) > 0
	case <-s.done:
	case <-idle:
	}
	return nil, false
}

// cut ends the stream early (the server drains, or the replica stopped
// leading): its body ends, and so does the connection.
func (s *eventStream) cut() ([]byte, bool) {
	s.closeSource()
	s.ended = true
	_ = s.write()
	return nil, false
}

// join returns a followed by b, without copying when a is empty.
func join(a, b []byte) []byte {
	if len(a) == 0 {
		return b
	}
	return append(a, b...)
}

// watch reads the connection while the stream lasts. An HTTP/1.1 client
// sends nothing on it before the response has ended (unless it pipelines),
// so the read returns either the start of its next request, or nothing
// when the client closed the connection or the stream closed it.
func (s *eventStream) watch() {
	n, _ := s.conn.Read(s.rbuf)
	s.read <- s.rbuf[:n]
}

// take adds one event received from the subscription (ok false: it has
// ended). A stream that follows a request gets one event, its outcome,
// after which it ends.
func (s *eventStream) take(ev api.Event, ok bool) {
	if !ok {
		s.ended = true
		return
	}
	if err := s.add(ev.Name, ev); err != nil {
		log.L.WithError(err).Error("encoding an event")
		s.closeSource()
		s.ended = true
		return
	}
	s.lastEvent = time.Now()
	if ev.Lease != nil {
		s.claims = append(s.claims, ev)
	}
	if s.sub != nil && s.sub.RequestID() != "" {
		s.ended = true
	}
}

// takeNode adds the events waiting on a node's stream.
func (s *eventStream) takeNode() {
	var ok bool
	s.batch, ok = s.node.Take(s.batch[:0])
	for _, ev := range s.batch {
		s.take(ev, true)
	}
	clear(s.batch)
	if !ok {
		s.ended = true
	}
}

// subEvents is the subscription's events; nil for a node's stream.
func (s *eventStream) subEvents() <-chan api.Event {
	if s.sub == nil {
		return nil
	}
	return s.sub.Events()
}

// nodeReady is the node stream's signal; nil for a subscription.
func (s *eventStream) nodeReady() <-chan struct{} {
	if s.node == nil {
		return nil
	}
	return s.node.Ready()
}

// watchesKey reports whether the stream watches a key (no request): it
// ends after watchIdle without an event.
func (s *eventStream) watchesKey() bool { return s.sub != nil && s.sub.RequestID() == "" }

// closeSource closes the subscription or the node's stream.
func (s *eventStream) closeSource() {
	if s.sub != nil {
		s.sub.Close()
	} else {
		s.node.Close()
	}
}

// collect takes the events already queued on the subscription, without
// waiting, so that they leave in one write.
func (s *eventStream) collect() {
	if s.node != nil {
		select {
		case <-s.node.Ready():
			s.takeNode()
		default:
		}
		return
	}
	for !s.ended {
		select {
		case ev, ok := <-s.sub.Events():
			s.take(ev, ok)
		default:
			return
		}
	}
}

// add appends one event to the events to write.
func (s *eventStream) add(name string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	s.events = append(s.events, "event: "...)
	s.events = append(s.events, name...)
	s.events = append(s.events, "\ndata: "...)
	s.events = append(s.events, b...)
	s.events = append(s.events, "\n\n"...)
	return nil
}

// write frames the pending events as a chunk, with the end of the body
// after them once the subscription has ended, and writes it all at once.
func (s *eventStream) write() error {
	if len(s.events) > 0 {
		s.out = strconv.AppendInt(s.out, int64(len(s.events)), 16)
		s.out = append(s.out, "\r\n"...)
		s.out = append(s.out, s.events...)
		s.out = append(s.out, "\r\n"...)
		s.events = s.events[:0]
	}
	if s.ended {
		s.out = append(s.out, lastChunk...)
	}
	if len(s.out) == 0 {
		return nil
	}
	if err := s.conn.SetWriteDeadline(time.Now().Add(sseWriteTimeout)); err != nil {
		return err
	}
	_, err := s.conn.Write(s.out)
	s.out = s.out[:0]
	if err == nil && len(s.claims) > 0 {
		for _, ev := range s.claims {
			if s.sub != nil {
				s.sub.Claimed(ev.Lease.LeaseID)
			} else {
				s.node.Claimed(ev.Type, ev.ResourceID, ev.Lease.LeaseID)
			}
		}
		clear(s.claims)
		s.claims = s.claims[:0]
	}
	return err
}
