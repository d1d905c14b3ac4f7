package plugin

import (
	"context"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/stats"
)

// A daemon stopping for an upgrade must not cut the pulls in flight
// (docs/operations.md "Versions and upgrades"). A pull is not one call but
// a run of them: a writer per blob, opened one after another as the blobs
// before it commit, a follower's writes refused Unavailable and retried
// by containerd (every 16 ms, backing off to 2 s) while another node
// downloads, then the unpack's diff calls. Refusing new calls would cut a
// pull between two of its blobs, so a draining server keeps serving every
// call (the daemon's /readyz says it is stopping). It is drained once no
// call has been in flight for DrainQuiet, longer than containerd's
// longest retry interval, so that a pull's next call would have come; or
// at once when no call is in flight and no client is connected
// (containerd stopped first): a pull in flight holds its containerd's
// connection.

// DrainQuiet is how long a draining server must see no call in flight
// before it counts as drained.
const DrainQuiet = 3 * time.Second

// calls counts the gRPC calls in flight, when the last one ended, and
// the client connections open.
type calls struct {
	mu       sync.Mutex
	inFlight int       // protected by mu
	lastEnd  time.Time // protected by mu
	conns    int       // protected by mu
	// idle gets a token when inFlight or conns drops to 0 (never
	// blocking).
	idle chan struct{}
}

func newCalls() *calls { return &calls{idle: make(chan struct{}, 1), lastEnd: time.Now()} }

func (c *calls) begin() {
	c.mu.Lock()
	c.inFlight++
	c.mu.Unlock()
}

func (c *calls) end() {
	c.mu.Lock()
	c.inFlight--
	c.lastEnd = time.Now()
	zero := c.inFlight == 0
	c.mu.Unlock()
	if zero {
		c.signal()
	}
}

func (c *calls) signal() {
	select {
	case c.idle <- struct{}{}:
	default:
	}
}

// TagConn, HandleConn, TagRPC and HandleRPC make calls a stats.Handler
// that counts the connections open.
func (c *calls) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context { return ctx }
func (c *calls) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context   { return ctx }
func (c *calls) HandleRPC(context.Context, stats.RPCStats)                         {}

func (c *calls) HandleConn(_ context.Context, s stats.ConnStats) {
	c.mu.Lock()
	switch s.(type) {
	case *stats.ConnBegin:
		c.conns++
	case *stats.ConnEnd:
		c.conns--
	}
	zero := c.conns == 0
	c.mu.Unlock()
	if zero {
		c.signal()
	}
}

func (c *calls) unary(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	c.begin()
	defer c.end()
	return h(ctx, req)
}

func (c *calls) stream(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	c.begin()
	defer c.end()
	return h(srv, ss)
}

// drain waits until no call has been in flight for quiet, or none is in
// flight and no client connected, or ctx ends (its error).
func (c *calls) drain(ctx context.Context, quiet time.Duration) error {
	for {
		c.mu.Lock()
		n, idleFor, conns := c.inFlight, time.Since(c.lastEnd), c.conns
		c.mu.Unlock()
		if n == 0 && (idleFor >= quiet || conns == 0) {
			return nil
		}
		// While calls are in flight, wait for the last to end; then
		// for the rest of the quiet time, unless another call comes and
		// goes.
		wait := time.Hour
		if n == 0 {
			wait = quiet - idleFor
		}
		t := time.NewTimer(wait)
		select {
		case <-c.idle:
		case <-t.C:
		case <-ctx.Done():
		}
		t.Stop()
		if err := ctx.Err(); err != nil {
			return err
		}
	}
}
