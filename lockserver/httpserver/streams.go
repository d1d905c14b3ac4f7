package httpserver

import (
	"fmt"
	"sync"

	"github.com/sharedcontent/sharedcontent/lockserver/api"
)

// Event streams hold a connection each for as long as a request waits, so
// they are bounded apart from connections (issue 17): in all and per IP
// address, below the connection limits, so that streams cannot take every
// connection a node's plain requests need. A stream over a limit is
// refused with 429; lockclient then polls /lock/status, whose answers are
// bounded.

// Default stream limits of a Handler. A Server uses half of its
// connection limits for the first two.
const (
	DefaultMaxStreams        = 8192
	DefaultMaxStreamsPerIP   = 512
	DefaultMaxStreamsPerNode = 512
)

// streamLimiter counts open event streams, in all, per client IP and per
// node.
type streamLimiter struct {
	total, perIP, perNode int

	mu     sync.Mutex
	open   int            // protected by mu
	byIP   map[string]int // protected by mu
	byNode map[string]int // protected by mu
}

func newStreamLimiter(total, perIP, perNode int) *streamLimiter {
	return &streamLimiter{total: total, perIP: perIP, perNode: perNode, byIP: map[string]int{}, byNode: map[string]int{}}
}

// acquire counts a stream from ip, for node (may be empty), in, or refuses
// it with an error matching api.ErrTooManyRequests. release must be called
// once the stream is over.
func (l *streamLimiter) acquire(ip, node string) (release func(), err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.open >= l.total:
		return nil, fmt.Errorf("%d event streams open (the limit); poll /lock/status or retry later: %w", l.open, api.ErrTooManyRequests)
	case l.byIP[ip] >= l.perIP:
		return nil, fmt.Errorf("%d event streams open from %s (the per-IP limit); poll /lock/status or retry later: %w", l.byIP[ip], ip, api.ErrTooManyRequests)
	case node != "" && l.byNode[node] >= l.perNode:
		return nil, fmt.Errorf("%d event streams open for node %s (the per-node limit); poll /lock/status or retry later: %w", l.byNode[node], node, api.ErrTooManyRequests)
	}
	l.open++
	l.byIP[ip]++
	if node != "" {
		l.byNode[node]++
	}
	var once sync.Once
	return func() { once.Do(func() { l.release(ip, node) }) }, nil
}

func (l *streamLimiter) release(ip, node string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.open--
	if l.byIP[ip]--; l.byIP[ip] <= 0 {
		delete(l.byIP, ip)
	}
	if node != "" {
		if l.byNode[node]--; l.byNode[node] <= 0 {
			delete(l.byNode, node)
		}
	}
}
