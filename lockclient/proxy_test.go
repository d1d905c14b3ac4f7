package lockclient

import (
	"bufio"
	"io"
	"mime"
	"net"
	"net/http"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// proxyAction is what the test proxy does with one request.
type proxyAction int

const (
	// forward passes the request and its answer through.
	forward proxyAction = iota
	// dropResponse forwards the request, so the server acts on it, then
	// swallows the answer and closes the client's connection.
	dropResponse
	// closeConn closes the client's connection without forwarding.
	closeConn
	// badGateway answers 502 without forwarding.
	badGateway
)

// tcpProxy is a real TCP proxy between a client and the coordinator. It
// reads each HTTP/1.1 request off the client's connection to apply rule,
// and relays event streams as they come.
type tcpProxy struct {
	ln     net.Listener
	target string
	url    string
	// rule decides the fate of a request; n counts requests with the same
	// "METHOD /path", from 1. Set before start.
	rule func(req *http.Request, n int) proxyAction

	wg sync.WaitGroup // accept loop and connection handlers

	mu      sync.Mutex
	counts  map[string]int        // protected by mu
	dropped [][]byte              // protected by mu: bodies of swallowed answers
	conns   map[net.Conn]struct{} // protected by mu: open connections
	closed  bool                  // protected by mu
}

func startProxy(t testing.TB, target string, rule func(*http.Request, int) proxyAction) *tcpProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &tcpProxy{ln: ln, target: target, url: "http://" + ln.Addr().String(), rule: rule,
		counts: map[string]int{}, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.close)
	return p
}

func (p *tcpProxy) count(k string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.counts[k]
}

func (p *tcpProxy) droppedBodies() [][]byte {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([][]byte(nil), p.dropped...)
}

// closeConns closes every open connection, as a network failure would.
func (p *tcpProxy) closeConns() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		c.Close()
	}
}

// close stops accepting, closes every connection and waits for the
// handlers.
func (p *tcpProxy) close() {
	p.mu.Lock()
	p.closed = true
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.ln.Close()
	p.wg.Wait()
}

func (p *tcpProxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		c.Close()
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *tcpProxy) release(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
	c.Close()
}

func (p *tcpProxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		if !p.track(c) {
			return
		}
		p.wg.Add(1)
		go p.serve(c)
	}
}

// serve relays the requests of one client connection over one upstream
// connection.
func (p *tcpProxy) serve(client net.Conn) {
	defer p.wg.Done()
	defer p.release(client)
	var (
		upstream net.Conn
		ubr      *bufio.Reader
	)
	defer func() {
		if upstream != nil {
			p.release(upstream)
		}
	}()
	br := bufio.NewReader(client)
	for {
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		k := req.Method + " " + req.URL.Path
		p.mu.Lock()
		p.counts[k]++
		n := p.counts[k]
		p.mu.Unlock()

		action := p.rule(req, n)
		switch action {
		case closeConn:
			return
		case badGateway:
			io.WriteString(client, "HTTP/1.1 502 Bad Gateway\r\nContent-Type: text/plain\r\nContent-Length: 11\r\nConnection: close\r\n\r\nbad gateway")
			return
		}
		if upstream == nil {
			if upstream, err = net.Dial("tcp", p.target); err != nil {
				return
			}
			if !p.track(upstream) {
				upstream = nil
				return
			}
			ubr = bufio.NewReader(upstream)
		}
		if req.Write(upstream) != nil {
			return
		}
		resp, err := http.ReadResponse(ubr, req)
		if err != nil {
			return
		}
		if action == dropResponse {
			body, _ := io.ReadAll(resp.Body)
			p.mu.Lock()
			p.dropped = append(p.dropped, body)
			p.mu.Unlock()
			return
		}
		if ct, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); ct == "text/event-stream" {
			// A stream lasts until either side closes: when the client
			// goes, close upstream too, so the server sees it leave.
			p.wg.Add(1)
			go func() {
				defer p.wg.Done()
				io.Copy(io.Discard, br)
				upstream.Close()
			}()
			resp.Write(client)
			return
		}
		err = resp.Write(client)
		resp.Body.Close()
		if err != nil {
			return
		}
	}
}
