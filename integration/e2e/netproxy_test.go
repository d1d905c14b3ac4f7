package e2e

import (
	"bytes"
	"io"
	"net"
	"sync"
	"testing"
	"time"
)

// proxyMode is what the cut-off proxy does with connections.
type proxyMode int

const (
	// proxyUp forwards every connection to the target.
	proxyUp proxyMode = iota
	// proxyRefuse resets every new connection at once (a host that is up
	// but not listening).
	proxyRefuse
	// proxyDrop accepts new connections and never answers (a network
	// partition: the client's own timeouts end each call).
	proxyDrop
	// proxyDelay forwards new connections but holds every byte the client
	// sends for the proxy's delay before passing it on: each request
	// (a keepalive too) reaches the target that much late; answers are
	// not delayed.
	proxyDelay
	// proxyKeepalive delays the client's session renewals (POST
	// /nodes/session) as proxyDelay does and black-holes every other
	// request: the connection it starts on is never answered.
	proxyKeepalive
)

// keepaliveRequest starts a session renewal on the wire.
var keepaliveRequest = []byte("POST /nodes/session ")

func (m proxyMode) String() string {
	switch m {
	case proxyUp:
		return "up"
	case proxyRefuse:
		return "refuse"
	case proxyDrop:
		return "drop"
	case proxyDelay:
		return "delay"
	case proxyKeepalive:
		return "keepalive"
	}
	return "?"
}

// netProxy is a TCP proxy between one node's plugin and the coordinator,
// which the test switches between forwarding, refusing, dropping and
// delaying connections. Switching to another mode closes every connection
// forwarded in the old one (both ends); switching to anything but
// proxyDrop closes the connections that were held while dropping, so the
// client reconnects.
type netProxy struct {
	ln     net.Listener
	target string
	wg     sync.WaitGroup // accept loop and forwarders

	mu        sync.Mutex
	mode      proxyMode               // protected by mu
	delay     time.Duration           // protected by mu: proxyDelay's delay
	forwarded map[net.Conn]forwarding // protected by mu: by client conn
	held      map[net.Conn]struct{}   // protected by mu: dropped client conns, open
	accepted  map[proxyMode]int       // protected by mu: connections accepted in each mode
	closed    bool                    // protected by mu
}

// startNetProxy listens on a free loopback port and forwards to target
// (host:port) until the test ends.
func startNetProxy(t *testing.T, target string) *netProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &netProxy{ln: ln, target: target, forwarded: map[net.Conn]forwarding{},
		held: map[net.Conn]struct{}{}, accepted: map[proxyMode]int{}}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.close)
	return p
}

func (p *netProxy) url() string { return "http://" + p.ln.Addr().String() }

// forwarding is a forwarded connection's upstream end and the mode it was
// accepted in.
type forwarding struct {
	up   net.Conn
	mode proxyMode
}

// set switches the proxy to m.
func (p *netProxy) set(m proxyMode) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.setLocked(m)
}

// setDelay switches the proxy to m (proxyDelay or proxyKeepalive) with
// delay d.
func (p *netProxy) setDelay(m proxyMode, d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.delay = d
	p.setLocked(m)
}

func (p *netProxy) setLocked(m proxyMode) {
	p.mode = m
	for c, f := range p.forwarded {
		if f.mode != m {
			c.Close()
			f.up.Close()
		}
	}
	if m == proxyDrop {
		return
	}
	for c := range p.held {
		c.Close()
		delete(p.held, c)
	}
}

// connections returns how many connections were accepted in mode m.
func (p *netProxy) connections(m proxyMode) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.accepted[m]
}

func (p *netProxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			c.Close()
			return
		}
		mode := p.mode
		p.accepted[mode]++
		switch mode {
		case proxyRefuse:
			if tc, ok := c.(*net.TCPConn); ok {
				_ = tc.SetLinger(0) // close with RST
			}
			c.Close()
		case proxyDrop:
			p.held[c] = struct{}{}
		case proxyUp, proxyDelay, proxyKeepalive:
			p.wg.Add(1)
			go p.forward(c, mode, p.delay)
		}
		p.mu.Unlock()
	}
}

// forward connects c to the target, in mode (proxyUp, or proxyDelay or
// proxyKeepalive with delay).
func (p *netProxy) forward(c net.Conn, mode proxyMode, delay time.Duration) {
	defer p.wg.Done()
	u, err := net.Dial("tcp", p.target)
	if err != nil {
		c.Close()
		return
	}
	p.mu.Lock()
	if p.closed || p.mode != mode {
		// Switched while dialling.
		p.mu.Unlock()
		c.Close()
		u.Close()
		return
	}
	p.forwarded[c] = forwarding{up: u, mode: mode}
	p.mu.Unlock()
	done := make(chan struct{})
	go func() {
		switch mode {
		case proxyDelay:
			copyDelayed(u, c, delay, nil)
		case proxyKeepalive:
			copyDelayed(u, c, delay, keepaliveRequest)
		default:
			_, _ = io.Copy(u, c)
		}
		u.Close()
		c.Close()
		close(done)
	}()
	_, _ = io.Copy(c, u)
	c.Close()
	u.Close()
	<-done
	p.mu.Lock()
	delete(p.forwarded, c)
	p.mu.Unlock()
}

// copyDelayed copies src to dst, each chunk delay after it was read
// (chunks keep their order; the delay does not add up). With only set, a
// chunk that starts an HTTP request other than only ends the forwarding:
// the rest of src is read and dropped.
func copyDelayed(dst io.Writer, src io.ReadCloser, delay time.Duration, only []byte) {
	type chunk struct {
		due time.Time
		b   []byte
	}
	chunks := make(chan chunk, 64)
	go func() {
		defer close(chunks)
		for {
			buf := make([]byte, 32<<10)
			n, err := src.Read(buf)
			if n > 0 {
				chunks <- chunk{due: time.Now().Add(delay), b: buf[:n]}
			}
			if err != nil {
				return
			}
		}
	}()
	for ch := range chunks {
		if only != nil && startsRequest(ch.b) && !bytes.HasPrefix(ch.b, only) {
			break // black-holed
		}
		time.Sleep(time.Until(ch.due))
		if _, err := dst.Write(ch.b); err != nil {
			src.Close() // ends the reader
			break
		}
	}
	for range chunks {
	}
}

// startsRequest reports whether b starts with an HTTP request line.
func startsRequest(b []byte) bool {
	for _, m := range []string{"GET ", "POST ", "PUT ", "DELETE ", "HEAD ", "PATCH ", "OPTIONS "} {
		if bytes.HasPrefix(b, []byte(m)) {
			return true
		}
	}
	return false
}

func (p *netProxy) close() {
	p.mu.Lock()
	p.closed = true
	p.ln.Close()
	for c, f := range p.forwarded {
		c.Close()
		f.up.Close()
	}
	for c := range p.held {
		c.Close()
	}
	p.held = map[net.Conn]struct{}{}
	p.mu.Unlock()
	p.wg.Wait()
}
