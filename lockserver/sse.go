package lockserver

import (
	"encoding/json"
	"io"
	"net"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/sharedcontent/sharedcontent/lockserver/api"
)

// sseHeartbeat is how often an idle stream gets a comment line, so that
// proxies and load balancers do not close it.
const sseHeartbeat = 15 * time.Second

var sseKeepalive = []byte(": keepalive\n\n")

// subscribe serves GET /lock/subscribe as Server-Sent Events: first the
// current state ("state"), then the events of the key or request. A waiter
// whose stream closes leaves its queue.
func (h *Handler) subscribe(ctx *fasthttp.RequestCtx) {
	q := ctx.QueryArgs()
	sub, err := h.locker.Subscribe(api.OperationType(q.Peek("type")), string(q.Peek("resource_id")), string(q.Peek("request_id")))
	if err != nil {
		writeError(ctx, err)
		return
	}
	s := &eventStream{sub: sub, done: h.streamsDone, conn: ctx.Conn(), heartbeat: time.NewTicker(sseHeartbeat)}
	if err := s.add(api.EventState, sub.First); err != nil {
		s.Close()
		writeError(ctx, err)
		return
	}
	ctx.Response.Header.SetContentType("text/event-stream")
	ctx.Response.Header.Set("Cache-Control", "no-cache")
	ctx.Response.Header.Set("X-Accel-Buffering", "no")
	s.watch()
	ctx.SetBodyStream(s, -1)
}

// eventStream is the body of one /lock/subscribe response. fasthttp reads
// it after the handler returns and writes what each Read returns as one
// chunk, flushed at once; Read blocks until there is an event to send.
// The stream ends (io.EOF) when the subscription ends, the client goes or
// the server drains. All methods but the watcher run on the connection's
// goroutine.
type eventStream struct {
	sub       *Subscription
	done      <-chan struct{} // Handler.streamsDone
	conn      net.Conn
	heartbeat *time.Ticker

	buf     []byte // encoded events; pending is what is left to Read
	pending []byte
	// claim is the lease of a grant in the last Read's data: fasthttp
	// reads again only once that data is flushed, so the grant has then
	// left for its holder.
	claim string

	// gone is closed when the watcher's read of the connection returns:
	// the client closed it (or, once Close set a deadline, the watch is
	// over). sentData says the client sent bytes during the stream.
	gone     chan struct{}
	sentData bool
	closed   bool
}

// watch detects that the client has gone while the stream waits for
// events, as net/http's background read does: an HTTP/1.1 client sends
// nothing on a connection before its response has ended, so a read that
// returns means the connection is closed.
func (s *eventStream) watch() {
	if s.conn == nil {
		return
	}
	// The stream outlives the server's read timeout, which still runs.
	if err := s.conn.SetReadDeadline(time.Time{}); err != nil {
		return
	}
	s.gone = make(chan struct{})
	go func() {
		defer close(s.gone)
		var b [1]byte
		n, _ := s.conn.Read(b[:])
		s.sentData = n > 0
	}()
}

func (s *eventStream) Read(p []byte) (int, error) {
	if len(s.pending) == 0 {
		if s.claim != "" {
			s.sub.Claimed(s.claim)
			s.claim = ""
		}
		if s.closed || !s.wait() {
			s.Close()
			return 0, io.EOF
		}
	}
	n := copy(p, s.pending)
	s.pending = s.pending[n:]
	return n, nil
}

// wait blocks until there is something to send: the events queued on the
// subscription (coalesced into one chunk), or a heartbeat. It returns
// false when the stream is over.
func (s *eventStream) wait() bool {
	s.buf = s.buf[:0]
	select {
	case ev, ok := <-s.sub.Events():
		for ok {
			if s.add(ev.Name, ev) != nil {
				return false
			}
			if ev.Lease != nil {
				s.claim = ev.Lease.LeaseID
			}
			select {
			case ev, ok = <-s.sub.Events():
			default:
				ok = false
			}
		}
		return len(s.pending) > 0
	case <-s.heartbeat.C:
		s.buf = append(s.buf, sseKeepalive...)
		s.pending = s.buf
		return true
	case <-s.gone:
		return false
	case <-s.done:
		return false
	}
}

// add appends one event to the data to send.
func (s *eventStream) add(name string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	s.buf = append(s.buf, "event: "...)
	s.buf = append(s.buf, name...)
	s.buf = append(s.buf, "\ndata: "...)
	s.buf = append(s.buf, b...)
	s.buf = append(s.buf, "\n\n"...)
	s.pending = s.buf
	return nil
}

// aLongTimeAgo is a read deadline that makes a blocked read return at once.
var aLongTimeAgo = time.Unix(1, 0)

// Close ends the subscription (a waiter leaves its queue) and stops the
// watcher, handing the connection back to fasthttp for the next request.
// fasthttp calls it once the response is written; it is idempotent.
func (s *eventStream) Close() error {
	if s.closed {
		return nil
	}
	s.closed = true
	s.heartbeat.Stop()
	s.sub.Close()
	if s.gone != nil {
		_ = s.conn.SetReadDeadline(aLongTimeAgo)
		<-s.gone
		if s.sentData {
			// Bytes the watcher consumed cannot be given back: the
			// connection cannot carry another request.
			return s.conn.Close()
		}
		_ = s.conn.SetReadDeadline(time.Time{})
	}
	return nil
}
