package testnet

import (
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
)

// Relay forwards TCP connections from a loopback address to one target,
// until it is black-holed: from then on it still accepts connections and
// keeps every connection open, but forwards nothing in either direction.
// A client behind it sees silence, not an error, as behind a network
// partition that drops packets (docs/design.md §7.2).
type Relay struct {
	ln     net.Listener
	target string
	holed  atomic.Bool

	mu     sync.Mutex
	conns  map[net.Conn]struct{} // protected by mu
	closed bool                  // protected by mu
	wg     sync.WaitGroup
}

// StartRelay listens on a free loopback port and forwards to target
// until the test ends.
func StartRelay(t testing.TB, target string) *Relay {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("relay: %v", err)
	}
	r := &Relay{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	r.wg.Add(1)
	go r.serve()
	t.Cleanup(r.Close)
	return r
}

// Addr is the relay's address (host:port).
func (r *Relay) Addr() string { return r.ln.Addr().String() }

// BlackHole makes the relay forward nothing from now on, on open
// connections and on new ones, without closing any.
func (r *Relay) BlackHole() { r.holed.Store(true) }

// Heal makes the relay forward again. Bytes dropped meanwhile are lost:
// the connections open during the black hole are closed, so that their
// ends see an error rather than a stream with a gap.
func (r *Relay) Heal() {
	r.mu.Lock()
	for c := range r.conns {
		c.Close()
	}
	r.mu.Unlock()
	r.holed.Store(false)
}

// Close stops the relay and closes its connections.
func (r *Relay) Close() {
	r.mu.Lock()
	r.closed = true
	for c := range r.conns {
		c.Close()
	}
	r.mu.Unlock()
	r.ln.Close()
	r.wg.Wait()
}

func (r *Relay) serve() {
	defer r.wg.Done()
	for {
		c, err := r.ln.Accept()
		if err != nil {
			return
		}
		if !r.track(c) {
			return
		}
		r.wg.Add(1)
		go r.forward(c)
	}
}

// track registers c; false once the relay is closed (c is closed then).
func (r *Relay) track(c net.Conn) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		c.Close()
		return false
	}
	r.conns[c] = struct{}{}
	return true
}

func (r *Relay) untrack(cs ...net.Conn) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range cs {
		c.Close()
		delete(r.conns, c)
	}
}

func (r *Relay) forward(c net.Conn) {
	defer r.wg.Done()
	if r.holed.Load() {
		// Accepted, never answered: read and drop until it is closed.
		_, _ = io.Copy(io.Discard, c)
		r.untrack(c)
		return
	}
	up, err := net.Dial("tcp", r.target)
	if err != nil {
		r.untrack(c)
		return
	}
	if !r.track(up) {
		r.untrack(c)
		return
	}
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		buf := make([]byte, 32<<10)
		for {
			n, err := src.Read(buf)
			if n > 0 && !r.holed.Load() {
				if _, werr := dst.Write(buf[:n]); werr != nil {
					break
				}
			}
			if err != nil {
				break
			}
		}
		done <- struct{}{}
	}
	go pipe(up, c)
	go pipe(c, up)
	<-done
	r.untrack(c, up)
	<-done
}
