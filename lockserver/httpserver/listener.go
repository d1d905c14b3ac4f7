package httpserver

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/containerd/log"
	"github.com/valyala/fasthttp"
	"golang.org/x/sys/unix"
)

// The coordinator must outlive a flood (docs/design.md §10.3). Connections are
// accepted before authentication and before TLS, so their number is
// bounded here, below the process's descriptor limit: a connection over a
// limit is answered 503 with Retry-After and closed. An accept that fails
// anyway (EMFILE and the like) is retried after a backoff, as net/http
// does, instead of ending Serve.

// ConnLimits bound the connections a Server serves.
type ConnLimits struct {
	// Total bounds open connections. Zero picks three quarters of the
	// process's descriptor limit (RLIMIT_NOFILE), leaving at least
	// maxRejecting+64 descriptors for answering 503s, the database and
	// logs.
	Total int
	// PerIP bounds open connections from one IP address. Zero picks
	// DefaultConnsPerIP.
	PerIP int
	// FirstHeader bounds the wait for a connection's first request
	// header (and its TLS handshake): a connection that has not sent
	// one by then is closed. Zero picks DefaultFirstHeaderTimeout.
	FirstHeader time.Duration
	// Idle is the longest a connection waits idle between requests
	// while fewer than half the Total slots are taken; above that it
	// shrinks with the free slots (evict.go). Zero picks DefaultIdle.
	Idle time.Duration
}

// DefaultConnsPerIP is the default of ConnLimits.PerIP: a node keeps a
// few pooled connections plus one event stream per queued request.
const DefaultConnsPerIP = 1024

// DefaultFirstHeaderTimeout is the default of ConnLimits.FirstHeader: a
// client sends its header at once; only the network and, over TLS, the
// handshake delay it.
const DefaultFirstHeaderTimeout = 5 * time.Second

// DefaultIdle is the default of ConnLimits.Idle.
const DefaultIdle = 2 * time.Minute

// withDefaults fills the zero fields.
func (c ConnLimits) withDefaults() ConnLimits {
	if c.Total <= 0 {
		c.Total = 4096
		var rl unix.Rlimit
		if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &rl); err == nil && rl.Cur < 1<<20 {
			c.Total = max(16, min(int(rl.Cur)*3/4, int(rl.Cur)-maxRejecting-64))
		}
	}
	if c.PerIP <= 0 {
		c.PerIP = DefaultConnsPerIP
	}
	if c.FirstHeader <= 0 {
		c.FirstHeader = DefaultFirstHeaderTimeout
	}
	if c.Idle <= 0 {
		c.Idle = DefaultIdle
	}
	return c
}

const (
	// maxRejecting bounds the connections being answered 503 at once;
	// beyond it they are closed without an answer.
	maxRejecting = 64
	// rejectTimeout bounds writing one 503 (and, over TLS, the
	// handshake before it).
	rejectTimeout = time.Second
	// rejectLinger is how long a rejected connection waits for the
	// client's request before it closes: a close with unread data would
	// reset the connection before the client reads the 503.
	rejectLinger = 100 * time.Millisecond
	// maxAcceptBackoff caps the wait between failed accepts.
	maxAcceptBackoff = time.Second
)

// guardedListener applies ConnLimits and retries failed accepts. It tracks
// its connections, and their fasthttp state, so that Shutdown can close
// those that never sent a request.
type guardedListener struct {
	net.Listener
	limits ConnLimits
	// header returns the header lines every answer carries (each ending
	// in CRLF), for the 503s written here; nil: none.
	header func() string
	// onReject counts a refused connection (by reason); onEvict one
	// closed to make room or for missing its first header deadline
	// (evict.go); onAcceptError an accept that failed and was retried.
	onReject      func(reason string)
	onEvict       func(reason string)
	onAcceptError func()

	rejecting atomic.Int32

	mu        sync.Mutex
	open      map[*trackedConn]struct{} // protected by mu
	perIP     map[string]int            // protected by mu
	lastSweep time.Time                 // protected by mu: of idle connections (evict.go)
	known     map[string]time.Time      // protected by mu: address → its last proven connection (evict.go)
}

func newGuardedListener(ln net.Listener, limits ConnLimits, header func() string, onReject, onEvict func(string), onAcceptError func()) *guardedListener {
	return &guardedListener{Listener: ln, limits: limits.withDefaults(), header: header, onReject: onReject, onEvict: onEvict,
		onAcceptError: onAcceptError, open: map[*trackedConn]struct{}{}, perIP: map[string]int{}, known: map[string]time.Time{}}
}

// Accept returns the next connection within the limits.
func (l *guardedListener) Accept() (net.Conn, error) {
	var backoff time.Duration
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			if !retryableAccept(err) {
				return nil, err
			}
			backoff = min(max(2*backoff, 5*time.Millisecond), maxAcceptBackoff)
			l.onAcceptError()
			log.L.WithError(err).WithField("retry_in", backoff).Warn("http: accept failed")
			time.Sleep(backoff)
			continue
		}
		backoff = 0
		tc, reason := l.admit(c)
		if tc == nil {
			l.reject(c, reason)
			continue
		}
		if _, ok := c.(*tls.Conn); ok {
			return trackedTLSConn{tc}, nil
		}
		return tc, nil
	}
}

// retryableAccept reports whether a failed accept may succeed later: the
// process or the system ran out of descriptors or memory, or a client
// gave up before it was accepted.
func retryableAccept(err error) bool {
	for _, errno := range []syscall.Errno{syscall.EMFILE, syscall.ENFILE, syscall.ENOBUFS, syscall.ENOMEM,
		syscall.ECONNABORTED, syscall.ECONNRESET, syscall.EAGAIN, syscall.EINTR, syscall.ETIMEDOUT} {
		if errors.Is(err, errno) {
			return true
		}
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// admit counts c in, or returns why it is over a limit. When every slot
// is taken it first makes room, if it can, by closing a connection that
// has not proven itself or waits idle (evict.go).
func (l *guardedListener) admit(c net.Conn) (*trackedConn, string) {
	ip := remoteIP(c)
	now := time.Now()
	l.sweepIdle(now)
	if victim, reason := l.victim(ip, now); victim != nil {
		victim.evict(reason)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.open) >= l.limits.Total {
		return nil, "total"
	}
	if ip != "" && l.perIP[ip] >= l.limits.PerIP {
		return nil, "per_ip"
	}
	tc := &trackedConn{Conn: c, l: l, ip: ip, admitted: now}
	tc.since.Store(now.UnixNano())
	l.open[tc] = struct{}{}
	if ip != "" {
		l.perIP[ip]++
	}
	tc.firstHeader = time.AfterFunc(l.limits.FirstHeader, func() {
		if !tc.proven.Load() {
			tc.evict("first_header")
		}
	})
	return tc, ""
}

func (l *guardedListener) release(tc *trackedConn) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.open[tc]; !ok {
		return
	}
	delete(l.open, tc)
	if tc.ip != "" {
		if l.perIP[tc.ip]--; l.perIP[tc.ip] <= 0 {
			delete(l.perIP, tc.ip)
		}
	}
}

// reject answers c 503 with Retry-After, off the accept loop, and closes
// it. Past maxRejecting answers in flight it just closes c.
func (l *guardedListener) reject(c net.Conn, reason string) {
	l.onReject(reason)
	if l.rejecting.Add(1) > maxRejecting {
		l.rejecting.Add(-1)
		c.Close()
		return
	}
	go func() {
		defer l.rejecting.Add(-1)
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(rejectTimeout))
		body := fmt.Sprintf(`{"error":"too many connections (%s limit); retry later","code":"unavailable"}`+"\n", reason)
		var header string
		if l.header != nil {
			header = l.header()
		}
		_, _ = fmt.Fprintf(c, "HTTP/1.1 %d %s\r\n%sRetry-After: 1\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s",
			fasthttp.StatusServiceUnavailable, fasthttp.StatusMessage(fasthttp.StatusServiceUnavailable), header, len(body), body)
		// Let the client's request arrive before closing, so that the
		// close does not reset the connection before it reads the 503.
		if tcp, ok := c.(interface{ CloseWrite() error }); ok {
			_ = tcp.CloseWrite()
			_ = c.SetReadDeadline(time.Now().Add(rejectLinger))
			_, _ = c.Read(make([]byte, 4096))
		}
	}()
}

// closeNew closes the connections that have not sent a request yet, or
// wait idle between requests: at shutdown nothing is lost with them.
func (l *guardedListener) closeNew() {
	l.mu.Lock()
	var idle []*trackedConn
	for tc := range l.open {
		if s := fasthttp.ConnState(tc.state.Load()); s == fasthttp.StateNew || s == fasthttp.StateIdle {
			idle = append(idle, tc)
		}
	}
	l.mu.Unlock()
	for _, tc := range idle {
		tc.Close()
	}
}

// setConnState is the fasthttp.Server's ConnState hook.
func setConnState(c net.Conn, s fasthttp.ConnState) {
	if t, ok := c.(interface{ tracked() *trackedConn }); ok {
		if tc := t.tracked(); tc != nil {
			tc.state.Store(int32(s))
			tc.since.Store(time.Now().UnixNano())
		}
	}
}

func remoteIP(c net.Conn) string {
	if a, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		return a.IP.String()
	}
	return ""
}

// trackedConn is an admitted connection: closing it gives its place back.
type trackedConn struct {
	net.Conn
	l        *guardedListener
	ip       string
	admitted time.Time
	state    atomic.Int32 // fasthttp.ConnState
	since    atomic.Int64 // UnixNano of the last state change (or admission)
	// proven: the connection carried a request from a known caller
	// (markProven); it is no longer evicted as new.
	proven      atomic.Bool
	firstHeader *time.Timer // closes it unless proven in time
	closed      sync.Once
}

func (c *trackedConn) tracked() *trackedConn { return c }

func (c *trackedConn) Close() error {
	err := c.Conn.Close()
	c.closed.Do(func() {
		c.firstHeader.Stop()
		c.l.release(c)
	})
	return err
}

// trackedTLSConn is a trackedConn over TLS: fasthttp still sees a TLS
// connection (RequestCtx.IsTLS, TLSConnectionState).
type trackedTLSConn struct{ *trackedConn }

func (c trackedTLSConn) Handshake() error { return c.Conn.(*tls.Conn).Handshake() }
func (c trackedTLSConn) ConnectionState() tls.ConnectionState {
	return c.Conn.(*tls.Conn).ConnectionState()
}
