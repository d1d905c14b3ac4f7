package plugin

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
)

// A daemon stopping for an upgrade must not cut the pulls in flight
// (docs/operations.md "Versions and upgrades"). A pull is not one call but
// a run of them: a writer per blob, opened one after another as the blobs
// before it commit, a follower's writes refused Unavailable and retried
// by containerd (every 16 ms, backing off to 2 s) while another node
// downloads, then the unpack's diff calls. Refusing new calls would cut a
// pull between two of its blobs, so a draining server keeps serving every
// call and reports itself draining (Draining, the daemon's /readyz); it is
// drained once no call has been in flight for DrainQuiet, longer than
// containerd's longest retry interval, so that a pull's next call would
// have come.

// DrainQuiet is how long a draining server must see no call in flight
// before it counts as drained.
const DrainQuiet = 3 * time.Second

// calls counts the gRPC calls in flight and when the last one ended.
type calls struct {
	mu       sync.Mutex
	inFlight int       // protected by mu
	lastEnd  time.Time // protected by mu
	// idle gets a token when inFlight drops to 0 (never blocking).
	idle     chan struct{}
	draining atomic.Bool
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
		select {
		case c.idle <- struct{}{}:
		default:
		}
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

// drain marks the server draining and waits until no call has been in
// flight for quiet, or ctx ends (its error).
func (c *calls) drain(ctx context.Context, quiet time.Duration) error {
	c.draining.Store(true)
	for {
		c.mu.Lock()
		n, idleFor := c.inFlight, time.Since(c.lastEnd)
		c.mu.Unlock()
		if n == 0 && idleFor >= quiet {
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
