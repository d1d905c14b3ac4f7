package scale

import (
	"context"
	"net"
	"sync/atomic"
	"time"
)

// nodeAddr is node i's source address, 127.1.x.y: Linux routes all of
// 127/8 to lo, so each node is a distinct client address to the
// coordinator (and has its own ephemeral ports).
func nodeAddr(i int) net.IP {
	return net.IPv4(127, byte(1+i/(250*250)), byte(i/250%250), byte(1+i%250))
}

// dialer connects from one node's address and counts what the node reads:
// the bytes the coordinator sent it.
type dialer struct {
	d    net.Dialer
	read *atomic.Int64
}

func newDialer(ip net.IP, read *atomic.Int64) *dialer {
	return &dialer{d: net.Dialer{LocalAddr: &net.TCPAddr{IP: ip}, Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}, read: read}
}

func (d *dialer) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	c, err := d.d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return &countingConn{Conn: c, read: d.read}, nil
}

func (d *dialer) Dial(addr string) (net.Conn, error) {
	return d.DialContext(context.Background(), "tcp", addr)
}

// countingConn counts the bytes read from it.
type countingConn struct {
	net.Conn
	read *atomic.Int64
}

func (c *countingConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	c.read.Add(int64(n))
	return n, err
}
