package e2e

import (
	"io"
	"net"
	"sync"
	"testing"
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
)

func (m proxyMode) String() string {
	switch m {
	case proxyUp:
		return "up"
	case proxyRefuse:
		return "refuse"
	case proxyDrop:
		return "drop"
	}
	return "?"
}

// netProxy is a TCP proxy between one node's plugin and the lock server,
// which the test switches between forwarding, refusing and dropping
// connections. Switching away from proxyUp closes every forwarded
// connection (both ends); switching back to proxyUp closes the connections
// that were held while dropping, so the client reconnects.
type netProxy struct {
	ln     net.Listener
	target string
	wg     sync.WaitGroup // accept loop and forwarders

	mu        sync.Mutex
	mode      proxyMode             // protected by mu
	forwarded map[net.Conn]net.Conn // protected by mu: client conn -> upstream conn
	held      map[net.Conn]struct{} // protected by mu: dropped client conns, open
	accepted  map[proxyMode]int     // protected by mu: connections accepted in each mode
	closed    bool                  // protected by mu
}

// startNetProxy listens on a free loopback port and forwards to target
// (host:port) until the test ends.
func startNetProxy(t *testing.T, target string) *netProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &netProxy{ln: ln, target: target, forwarded: map[net.Conn]net.Conn{},
		held: map[net.Conn]struct{}{}, accepted: map[proxyMode]int{}}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.close)
	return p
}

func (p *netProxy) url() string { return "http://" + p.ln.Addr().String() }

// set switches the proxy to m.
func (p *netProxy) set(m proxyMode) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.mode = m
	if m != proxyUp {
		for c, u := range p.forwarded {
			c.Close()
			u.Close()
		}
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
		case proxyUp:
			p.wg.Add(1)
			go p.forward(c)
		}
		p.mu.Unlock()
	}
}

func (p *netProxy) forward(c net.Conn) {
	defer p.wg.Done()
	u, err := net.Dial("tcp", p.target)
	if err != nil {
		c.Close()
		return
	}
	p.mu.Lock()
	if p.closed || p.mode != proxyUp {
		// Switched while dialling.
		p.mu.Unlock()
		c.Close()
		u.Close()
		return
	}
	p.forwarded[c] = u
	p.mu.Unlock()
	done := make(chan struct{})
	go func() {
		_, _ = io.Copy(u, c)
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

func (p *netProxy) close() {
	p.mu.Lock()
	p.closed = true
	p.ln.Close()
	for c, u := range p.forwarded {
		c.Close()
		u.Close()
	}
	for c := range p.held {
		c.Close()
	}
	p.held = map[net.Conn]struct{}{}
	p.mu.Unlock()
	p.wg.Wait()
}
