package testnet

import (
	"net"
	"sync/atomic"
)

// CountingListener is a net.Listener that counts the connections it
// accepts.
type CountingListener struct {
	net.Listener
	accepted atomic.Int64
}

// Count wraps ln.
func Count(ln net.Listener) *CountingListener { return &CountingListener{Listener: ln} }

// Accept accepts the next connection and counts it.
func (l *CountingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.accepted.Add(1)
	}
	return c, err
}

// Accepted returns how many connections have been accepted so far.
func (l *CountingListener) Accepted() int64 { return l.accepted.Load() }
