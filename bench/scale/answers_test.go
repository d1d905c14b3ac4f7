package scale

import (
	"net"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
)

// TestAnswersOtherKinds: of the "other" errors, a request to an address
// nobody listens on (a coordinator down) counts as refused, and one whose
// connection the server closes without answering (a coordinator killed
// with the request in flight) as cut.
func TestAnswersOtherKinds(t *testing.T) {
	do := func(addr string) error {
		hc := &fasthttp.HostClient{Addr: addr, MaxIdemponentCallAttempts: 1}
		req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
		defer fasthttp.ReleaseRequest(req)
		defer fasthttp.ReleaseResponse(resp)
		req.SetRequestURI("http://" + addr + "/nodes/session")
		req.Header.SetMethod("POST")
		return hc.DoTimeout(req, resp, time.Minute)
	}
	// Nobody listens: bind a port, then close it.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := ln.Addr().String()
	ln.Close()
	// A server that reads the request and closes the connection.
	cutter, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer cutter.Close()
	go func() {
		for {
			c, err := cutter.Accept()
			if err != nil {
				return
			}
			buf := make([]byte, 4096)
			_, _ = c.Read(buf)
			c.Close()
		}
	}()
	var a answers
	a.note(do(down), 0)
	a.note(do(cutter.Addr().String()), 0)
	a.note(nil, 500)
	got := a.errors()
	if got.Other != 3 || got.Refused != 1 || got.Cut != 1 {
		t.Fatalf("other %d (refused %d, cut %d), want 3 (refused 1, cut 1)", got.Other, got.Refused, got.Cut)
	}
	if s := errs(got); s != "0 / 0 / 0 / 3 (refused 1, cut 1)" {
		t.Fatalf("shown as %q", s)
	}
}
