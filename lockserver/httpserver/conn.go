package httpserver

import (
	"crypto/tls"
	"net"
	"time"
)

// An event stream takes its connection over from fasthttp (a hijack) and
// hands it back when the stream is over (Server.ServeConn), so that the
// client's next request is served on it. The functions here make that
// round trip lossless and keep it from nesting wrappers.

// aLongTimeAgo is a read deadline that makes a blocked read return at once.
var aLongTimeAgo = time.Unix(1, 0)

// takeOver returns the connection under a hijacked one and the bytes the
// server had already read past the current request (from a client that
// pipelines; normally none). It reads into buf.
func takeOver(hijacked net.Conn, buf []byte) (net.Conn, []byte) {
	u, ok := hijacked.(interface{ UnsafeConn() net.Conn })
	if !ok {
		return hijacked, nil
	}
	conn := u.UnsafeConn()
	// The hijacked connection reads through the server's buffer, then
	// through conn: with a deadline in the past, a read fails as soon as
	// the buffers in between are empty, without waiting for the client.
	if err := conn.SetReadDeadline(aLongTimeAgo); err != nil {
		return hijacked, nil
	}
	var ahead []byte
	for {
		n, err := hijacked.Read(buf)
		ahead = append(ahead, buf[:n]...)
		if err != nil || n == 0 {
			break
		}
	}
	if err := conn.SetReadDeadline(time.Time{}); err != nil {
		return hijacked, nil
	}
	// The prefix of a connection resumed after an earlier stream has
	// been read by now: unwrap it.
	for {
		switch c := conn.(type) {
		case *resumedConn:
			conn = c.Conn
		case resumedTLSConn:
			conn = c.Conn
		default:
			return conn, ahead
		}
	}
}

// resume returns conn for the server to serve again, reading prefix (the
// start of the client's next request, already read) first.
func resume(conn net.Conn, prefix []byte) net.Conn {
	rc := &resumedConn{Conn: conn, prefix: prefix}
	if tc, ok := conn.(tlsConn); ok {
		return resumedTLSConn{resumedConn: rc, tls: tc}
	}
	return rc
}

// tlsConn is what fasthttp looks for in a TLS connection.
type tlsConn interface {
	Handshake() error
	ConnectionState() tls.ConnectionState
}

// resumedConn is a connection given back to the server after an event
// stream.
type resumedConn struct {
	net.Conn
	prefix []byte
}

// tracked returns the guardedListener's record of the connection, if any.
func (c *resumedConn) tracked() *trackedConn {
	if t, ok := c.Conn.(interface{ tracked() *trackedConn }); ok {
		return t.tracked()
	}
	return nil
}

func (c *resumedConn) Read(p []byte) (int, error) {
	if len(c.prefix) > 0 {
		n := copy(p, c.prefix)
		c.prefix = c.prefix[n:]
		return n, nil
	}
	return c.Conn.Read(p)
}

// resumedTLSConn is a resumedConn over TLS: fasthttp still sees a TLS
// connection (RequestCtx.IsTLS, TLSConnectionState).
type resumedTLSConn struct {
	*resumedConn
	tls tlsConn
}

func (c resumedTLSConn) Handshake() error                     { return c.tls.Handshake() }
func (c resumedTLSConn) ConnectionState() tls.ConnectionState { return c.tls.ConnectionState() }
