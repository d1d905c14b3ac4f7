package integration

import (
	"bytes"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// netProxy forwards TCP connections from its own loopback address to a
// target (one node's way to the coordinator), and lets a test cut that
// way (every connection closed, new ones closed at once) or hold requests
// that match a pattern (a slow call, a stalled node).
type netProxy struct {
	ln     net.Listener
	target string
	done   chan struct{}
	wg     sync.WaitGroup

	mu    sync.Mutex
	cut   bool                  // protected by mu
	conns map[net.Conn]struct{} // protected by mu; both ends of every forwarded connection
	holds []*hold               // protected by mu
}

// hold holds client-to-server chunks that contain one of its patterns:
// for delay, or until release when delay is zero.
type hold struct {
	patterns [][]byte
	left     int // requests still to hold; negative: all (protected by netProxy.mu)
	delay    time.Duration
	released chan struct{}
	once     sync.Once
	held     chan struct{} // one value per request held (buffered)
	count    atomic.Int64
}

// release lets every held request (and every later one) through.
func (h *hold) release() { h.once.Do(func() { close(h.released) }) }

// Held returns how many requests it has held.
func (h *hold) Held() int64 { return h.count.Load() }

// waitHeld waits until it holds a request.
func (h *hold) waitHeld(t testing.TB, within time.Duration) {
	t.Helper()
	select {
	case <-h.held:
	case <-time.After(within):
		t.Fatalf("no request matching %q was held within %s", h.patterns, within)
	}
}

func startProxy(t testing.TB, target string) *netProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &netProxy{ln: ln, target: target, done: make(chan struct{}), conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.serve()
	t.Cleanup(p.close)
	return p
}

// URL is the coordinator's URL as seen through the proxy.
func (p *netProxy) URL() string { return "http://" + p.ln.Addr().String() }

func (p *netProxy) serve() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.wg.Add(1)
		go p.forward(c)
	}
}

func (p *netProxy) track(cs ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cut {
		return false
	}
	for _, c := range cs {
		p.conns[c] = struct{}{}
	}
	return true
}

func (p *netProxy) untrack(cs ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range cs {
		delete(p.conns, c)
		c.Close()
	}
}

func (p *netProxy) forward(c net.Conn) {
	defer p.wg.Done()
	if !p.track(c) {
		c.Close()
		return
	}
	up, err := net.DialTimeout("tcp", p.target, time.Second)
	if err != nil {
		p.untrack(c)
		return
	}
	if !p.track(up) {
		up.Close()
		p.untrack(c)
		return
	}
	defer p.untrack(c, up)
	go func() {
		_, _ = io.Copy(c, up)
		p.untrack(c, up)
	}()
	buf := make([]byte, 64<<10)
	for {
		n, err := c.Read(buf)
		if n > 0 {
			if !p.pass(buf[:n]) {
				return
			}
			if _, werr := up.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// pass holds chunk as a matching hold says; false when the proxy closes
// meanwhile.
func (p *netProxy) pass(chunk []byte) bool {
	p.mu.Lock()
	var h *hold
	for _, c := range p.holds {
		if c.left == 0 {
			continue
		}
		for _, pat := range c.patterns {
			if bytes.Contains(chunk, pat) {
				h = c
				break
			}
		}
		if h != nil {
			if h.left > 0 {
				h.left--
			}
			break
		}
	}
	p.mu.Unlock()
	if h == nil {
		return true
	}
	h.count.Add(1)
	select {
	case h.held <- struct{}{}:
	default:
	}
	var after <-chan time.Time
	if h.delay > 0 {
		tm := time.NewTimer(h.delay)
		defer tm.Stop()
		after = tm.C
	}
	select {
	case <-after:
	case <-h.released:
	case <-p.done:
		return false
	}
	return true
}

// holdRequests holds the next n requests (n < 0: all of them, until
// release) whose bytes contain one of patterns, each for delay (zero:
// until release).
func (p *netProxy) holdRequests(n int, delay time.Duration, patterns ...string) *hold {
	h := &hold{left: n, delay: delay, released: make(chan struct{}), held: make(chan struct{}, 1024)}
	for _, s := range patterns {
		h.patterns = append(h.patterns, []byte(s))
	}
	p.mu.Lock()
	p.holds = append(p.holds, h)
	p.mu.Unlock()
	return h
}

// Cut closes every connection and refuses new ones until Reconnect: the
// node is partitioned from the coordinator.
func (p *netProxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = true
	for c := range p.conns {
		c.Close()
		delete(p.conns, c)
	}
}

// Reconnect ends a Cut.
func (p *netProxy) Reconnect() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = false
}

func (p *netProxy) IsCut() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cut
}

func (p *netProxy) close() {
	select {
	case <-p.done:
		return
	default:
	}
	close(p.done)
	p.ln.Close()
	p.Cut()
	p.wg.Wait()
}

// TestNetProxy: the proxy forwards, cuts, holds and releases.
func TestNetProxy(t *testing.T) {
	echo, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer echo.Close()
	go func() {
		for {
			c, err := echo.Accept()
			if err != nil {
				return
			}
			go func() { _, _ = io.Copy(c, c); c.Close() }()
		}
	}()
	p := startProxy(t, echo.Addr().String())
	roundTrip := func(msg string) error {
		c, err := net.DialTimeout("tcp", p.ln.Addr().String(), time.Second)
		if err != nil {
			return err
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Write([]byte(msg)); err != nil {
			return err
		}
		got := make([]byte, len(msg))
		if _, err := io.ReadFull(c, got); err != nil {
			return err
		}
		if string(got) != msg {
			return errors.New("echo mismatch")
		}
		return nil
	}
	require.NoError(t, roundTrip("hello"))
	p.Cut()
	require.Error(t, roundTrip("hello"))
	p.Reconnect()
	require.NoError(t, roundTrip("hello"))

	h := p.holdRequests(-1, 0, "HOLD")
	errc := make(chan error, 1)
	go func() { errc <- roundTrip("HOLD me") }()
	h.waitHeld(t, 5*time.Second)
	select {
	case err := <-errc:
		t.Fatalf("a held request went through: %v", err)
	default:
	}
	require.NoError(t, roundTrip("other"), "only matching requests are held")
	h.release()
	require.NoError(t, <-errc)
	require.EqualValues(t, 1, h.Held())

	d := p.holdRequests(1, 100*time.Millisecond, "SLOW")
	start := time.Now()
	require.NoError(t, roundTrip("SLOW"))
	require.GreaterOrEqual(t, time.Since(start), 100*time.Millisecond)
	require.NoError(t, roundTrip("SLOW again"), "only the next one is slowed")
	require.EqualValues(t, 1, d.Held())
}
