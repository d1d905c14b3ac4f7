package scale

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/sharedcontent/sharedcontent/lockserver/api"
)

// answers counts, over all nodes, every request's outcome that was not an
// answer the caller wanted: each attempt counts (lockclient retries
// transient errors itself), so one call can count several times.
type answers struct {
	timeouts    atomic.Int64 // no answer in time (client deadline)
	unavailable atomic.Int64 // 503
	tooMany     atomic.Int64 // 429
	other       atomic.Int64 // any other 5xx, refused connections, resets, …
	// Of other: connections refused (nobody listening: the coordinator
	// is down) and connections cut (reset or closed by the peer: it
	// went down, or closed an idle keep-alive, with the request sent).
	refused, cut atomic.Int64

	requests    requestCounts // requests sent, by kind
	bytesRead   atomic.Int64  // bytes the nodes read from the coordinator
	streams     atomic.Int64  // event streams open now
	peakStreams atomic.Int64
}

// Errors is a snapshot of answers' error counts.
type Errors struct {
	Timeouts, Unavailable, TooMany, Other int64
	// Refused and Cut are part of Other (answers.refused, answers.cut).
	Refused, Cut int64
}

func (e Errors) Total() int64 { return e.Timeouts + e.Unavailable + e.TooMany + e.Other }

func (e Errors) sub(o Errors) Errors {
	return Errors{e.Timeouts - o.Timeouts, e.Unavailable - o.Unavailable, e.TooMany - o.TooMany, e.Other - o.Other,
		e.Refused - o.Refused, e.Cut - o.Cut}
}

func (a *answers) errors() Errors {
	return Errors{a.timeouts.Load(), a.unavailable.Load(), a.tooMany.Load(), a.other.Load(), a.refused.Load(), a.cut.Load()}
}

// note counts one attempt's outcome: a transport error, or the status.
func (a *answers) note(err error, status int) {
	var ne net.Error
	switch {
	case err != nil && (errors.Is(err, fasthttp.ErrTimeout) || errors.Is(err, context.DeadlineExceeded) ||
		(errors.As(err, &ne) && ne.Timeout())):
		a.timeouts.Add(1)
	case err != nil && errors.Is(err, context.Canceled):
		// The caller gave up (end of the scenario): not the coordinator's.
	case err != nil:
		a.other.Add(1)
		switch {
		case errors.Is(err, syscall.ECONNREFUSED):
			a.refused.Add(1)
		case errors.Is(err, syscall.ECONNRESET) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
			errors.Is(err, fasthttp.ErrConnectionClosed) || errors.Is(err, syscall.EPIPE):
			a.cut.Add(1)
		}
	case status == http.StatusServiceUnavailable:
		a.unavailable.Add(1)
	case status == http.StatusTooManyRequests:
		a.tooMany.Add(1)
	case status >= 500:
		a.other.Add(1)
	}
}

// shortClient is lockclient's ShortClient of one node: a fasthttp client
// bound to the node's address, counting every answer and noting which
// lock requests the coordinator queued.
type shortClient struct {
	hc     *fasthttp.HostClient
	held   *fasthttp.HostClient // unlocks and keepalives
	a      *answers
	queued queuedAt
	// sessions, if set, carries the node's session calls and syncs
	// (Config.SessionConn); nil: they share hc.
	sessions *fasthttp.HostClient
}

func (c *shortClient) DoDeadline(req *fasthttp.Request, resp *fasthttp.Response, deadline time.Time) error {
	c.a.requests.note(string(req.Header.Method()), string(req.URI().Path()))
	hc := c.hc
	switch p := string(req.URI().Path()); {
	case p == "/unlock" || p == "/lock/keepalive":
		hc = c.held
	case c.sessions != nil && strings.HasPrefix(p, "/nodes/"):
		hc = c.sessions
	}
	err := hc.DoDeadline(req, resp, deadline)
	c.a.note(err, resp.StatusCode())
	if err == nil && resp.StatusCode() == http.StatusOK && string(req.URI().Path()) == "/lock" {
		c.queued.note(req.Body(), resp.Body())
	}
	return err
}

// queuedAt records, by resource, that the coordinator answered a node's
// lock request "queued": the node then waits for the outcome on its event
// stream. A request answered at once (granted, or skip because the blob
// was done meanwhile) was never woken.
type queuedAt struct{ m sync.Map }

func (q *queuedAt) note(reqBody, respBody []byte) {
	var r api.LockResponse
	if json.Unmarshal(respBody, &r) != nil || !r.Queued {
		return
	}
	var lr api.LockRequest
	if json.Unmarshal(reqBody, &lr) == nil {
		q.m.Store(lr.ResourceID, true)
	}
}

// take reports whether a lock request of resourceID was queued, and
// forgets it.
func (q *queuedAt) take(resourceID string) bool {
	_, ok := q.m.LoadAndDelete(resourceID)
	return ok
}

// CloseIdleConnections lets lockclient's Close close them.
func (c *shortClient) CloseIdleConnections() {
	c.hc.CloseIdleConnections()
	c.held.CloseIdleConnections()
	if c.sessions != nil {
		c.sessions.CloseIdleConnections()
	}
}

// streamTransport is the round tripper of one node's event streams (the
// only long requests), counting answers and the streams open.
type streamTransport struct {
	rt   *http.Transport
	a    *answers
	seen eventSeen
}

func (t *streamTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	t.a.requests.note(req.Method, req.URL.Path)
	resp, err := t.rt.RoundTrip(req)
	if err != nil {
		t.a.note(err, 0)
		return nil, err
	}
	t.a.note(nil, resp.StatusCode)
	if resp.StatusCode == http.StatusOK {
		n := t.a.streams.Add(1)
		for {
			p := t.a.peakStreams.Load()
			if n <= p || t.a.peakStreams.CompareAndSwap(p, n) {
				break
			}
		}
		resp.Body = &streamBody{ReadCloser: resp.Body, a: t.a, seen: &t.seen}
	}
	return resp, nil
}

// streamBody counts the stream closed when its reader closes it.
type streamBody struct {
	io.ReadCloser
	a      *answers
	seen   *eventSeen
	closed atomic.Bool
}

// Read notes when each event arrived, as soon as lockclient's reader gets
// its bytes, before lockclient parses and dispatches it.
func (b *streamBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if n > 0 {
		b.seen.note(p[:n], time.Now())
	}
	return n, err
}

// eventSeen records, by resource, when the first event about it was read
// from the node's stream.
type eventSeen struct{ m sync.Map }

var resourceField = []byte(`"resource_id":"`)

func (e *eventSeen) note(b []byte, at time.Time) {
	for {
		i := bytes.Index(b, resourceField)
		if i < 0 {
			return
		}
		b = b[i+len(resourceField):]
		j := bytes.IndexByte(b, '"')
		if j < 0 {
			return // split across reads: that event goes unnoted
		}
		e.m.LoadOrStore(string(b[:j]), at)
		b = b[j:]
	}
}

// take returns when an event about resourceID was first read (false:
// none was), and forgets it.
func (e *eventSeen) take(resourceID string) (time.Time, bool) {
	v, ok := e.m.LoadAndDelete(resourceID)
	if !ok {
		return time.Time{}, false
	}
	return v.(time.Time), true
}

func (b *streamBody) Close() error {
	if b.closed.CompareAndSwap(false, true) {
		b.a.streams.Add(-1)
	}
	return b.ReadCloser.Close()
}
