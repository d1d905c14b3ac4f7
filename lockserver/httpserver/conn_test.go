package httpserver

import (
	"bufio"
	"io"
	"net"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttputil"
)

// hijacked is a connection as fasthttp hands it to a hijack handler: it
// reads through the server's buffer, and UnsafeConn is the connection.
type hijacked struct {
	net.Conn
	r io.Reader
}

func (c *hijacked) Read(p []byte) (int, error) { return c.r.Read(p) }
func (c *hijacked) UnsafeConn() net.Conn       { return c.Conn }

// TestTakeOver: takeOver returns the connection itself, with the bytes
// the server had read ahead, and unwraps a connection resumed after an
// earlier stream, so that streams on one connection do not nest wrappers.
func TestTakeOver(t *testing.T) {
	for _, tc := range []struct {
		name     string
		wrap     func(net.Conn) net.Conn
		buffered string // what the server read ahead, in its buffer
		want     string
	}{
		{name: "fresh", wrap: func(c net.Conn) net.Conn { return c }},
		{name: "pipelined", wrap: func(c net.Conn) net.Conn { return c }, buffered: healthzReq, want: healthzReq},
		{name: "resumed", wrap: func(c net.Conn) net.Conn { return resume(c, nil) }},
		{name: "resumed twice", wrap: func(c net.Conn) net.Conn { return resume(resume(c, nil), nil) }},
		{name: "resumed, prefix unread", wrap: func(c net.Conn) net.Conn { return resume(c, []byte(healthzReq)) }, want: healthzReq},
	} {
		t.Run(tc.name, func(t *testing.T) {
			conn, peer := net.Pipe()
			defer peer.Close()
			served := tc.wrap(conn)
			br := bufio.NewReader(served)
			if tc.buffered != "" {
				go peer.Write([]byte(tc.buffered))
				_, err := br.Peek(len(tc.buffered))
				require.NoError(t, err)
			}
			got, ahead := takeOver(&hijacked{Conn: served, r: br}, make([]byte, 16))
			require.Same(t, conn, got)
			require.Equal(t, tc.want, string(ahead))

			// The connection reads on, without the deadline takeOver used.
			go peer.Write([]byte("next"))
			b := make([]byte, 4)
			_, err := io.ReadFull(got, b)
			require.NoError(t, err)
			require.Equal(t, "next", string(b))
		})
	}
}

// TestHijackedConnUnwraps: fasthttp's hijacked connections still offer
// the connection itself (UnsafeConn), which takeOver relies on.
func TestHijackedConnUnwraps(t *testing.T) {
	ln := fasthttputil.NewInmemoryListener()
	unwraps := make(chan bool, 1)
	srv := &fasthttp.Server{Handler: func(ctx *fasthttp.RequestCtx) {
		ctx.HijackSetNoResponse(true)
		ctx.Hijack(func(c net.Conn) {
			_, ok := c.(interface{ UnsafeConn() net.Conn })
			unwraps <- ok
		})
	}}
	go srv.Serve(ln)
	defer srv.Shutdown()
	c, err := ln.Dial()
	require.NoError(t, err)
	defer c.Close()
	_, err = io.WriteString(c, healthzReq)
	require.NoError(t, err)
	require.True(t, <-unwraps)
}
