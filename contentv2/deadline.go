package contentv2

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/containerd/errdefs"
	"github.com/containerd/log"
	"github.com/opencontainers/go-digest"
	"github.com/prometheus/client_golang/prometheus"
)

// Storage deadlines (docs/design.md §8.20). A shared filesystem that stops
// answering (an NFS hard mount whose server is gone, a GlusterFS volume
// that lost its bricks) blocks every syscall on the root, and a syscall
// cannot be cancelled. So every call of the store that touches the root
// runs in a goroutine of its own, and the caller waits for it at most the
// storage timeout: then it gets ErrRootStalled (and ErrUnavailable, which
// containerd retries) naming the root, while the call goes on in the
// background. The store is stalled while any call is past its deadline;
// while stalled it decides nothing (no delete, no reaper pass), and once
// maxStuckCalls calls are stuck new ones fail at once instead of stacking
// up more blocked threads. It resumes by itself when the stuck calls
// return.

const (
	// DefaultStorageTimeout bounds one call on the shared root
	// (--storage-timeout). It is per operation, never per byte: a read or
	// write of one chunk, a look-up, a rename, or a Commit (whose fsync of
	// the blob's last unflushed pages is its longest part). An NFS hard
	// mount reports "server not responding" after 60 s (timeo=600); half
	// of that is far beyond a healthy call and still leaves a pull, and
	// containerd's metadata transaction a Writer runs in, bounded.
	DefaultStorageTimeout = 30 * time.Second
	// maxStuckCalls is how many calls may be stuck on a hung root before
	// new ones fail at once: each stuck call holds an OS thread blocked in
	// the kernel, and a process has a bounded number of them.
	maxStuckCalls = 32
)

// ErrRootStalled is the error of a call on the shared root that did not
// answer within the storage timeout, and of the calls refused while the
// root is stalled. Such errors also match errdefs.ErrUnavailable.
var ErrRootStalled = errors.New("shared root not answering")

// StallReporter is what the daemon's readiness asks: RootStalled is nil
// while every call on the shared root answers in time, and otherwise an
// error naming the root, how many calls are stuck and since when. Every
// Store implements it.
type StallReporter interface {
	RootStalled() error
}

// WithStorageTimeout bounds each call on the shared root (0: the default,
// DefaultStorageTimeout; docs/design.md §8.20).
func WithStorageTimeout(d time.Duration) Option { return func(s *store) { s.storageTimeout = d } }

// RootStalled implements StallReporter.
func (s *store) RootStalled() error { return s.guard.refuse("") }

// guard runs calls on the shared root with a deadline and keeps the
// stalled state.
type guard struct {
	// recovered, when set (before the first call), runs when a stall
	// ends: the store probes its root again at once (rootwatch.go).
	recovered func()
	root      string
	timeout   time.Duration
	max       int
	stalled   prometheus.Gauge
	timeouts  *prometheus.CounterVec

	mu sync.Mutex
	// overdue counts the calls past their deadline that have not
	// returned; the root is stalled while it is not 0. Protected by mu.
	overdue int
	// since is when the current stall began. Protected by mu.
	since time.Time
	// stalls counts the stalls begun, and begun is closed when the next
	// one begins: a decision taken over a stall is discarded. Protected
	// by mu.
	stalls uint64
	begun  chan struct{}
}

func newGuard(root string, timeout time.Duration, reg prometheus.Registerer) (*guard, error) {
	if timeout <= 0 {
		return nil, fmt.Errorf("storage timeout %v: must be positive: %w", timeout, errdefs.ErrInvalidArgument)
	}
	g := &guard{root: root, timeout: timeout, max: maxStuckCalls, begun: make(chan struct{}),
		stalled: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sharedcontent_root_stalled",
			Help: "1 while a call on the shared root has not answered within --storage-timeout: its calls fail as unavailable, and it deletes and reaps nothing until the root answers again.",
		}),
		timeouts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sharedcontent_root_timeouts_total",
			Help: "Calls on the shared root that did not answer within --storage-timeout, by operation.",
		}, []string{"op"}),
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{g.stalled, g.timeouts} {
			if err := reg.Register(c); err != nil {
				return nil, err
			}
		}
	}
	return g, nil
}

// call is one call on the root running in its own goroutine.
type call struct {
	g     *guard
	op    string
	timer *time.Timer
	late  chan struct{} // closed when the call goes overdue
	done  chan struct{} // closed once fn has returned
	// deadline, overdue, finished and abandoned (the caller stopped
	// waiting) are protected by g.mu.
	deadline                     time.Time
	overdue, finished, abandoned bool
}

// start runs fn in a goroutine with the storage timeout; abandoned, if
// not nil, runs after fn there when the caller stopped waiting first (to
// close or undo what fn opened or did late). Once max calls are stuck it
// refuses at once.
func (g *guard) start(op string, fn func(), abandoned func()) (*call, error) {
	g.mu.Lock()
	if g.overdue >= g.max {
		err := g.errLocked(op)
		g.mu.Unlock()
		return nil, err
	}
	c := &call{g: g, op: op, late: make(chan struct{}), done: make(chan struct{}), deadline: time.Now().Add(g.timeout)}
	c.timer = time.AfterFunc(g.timeout, c.expire)
	g.mu.Unlock()
	go func() {
		fn()
		if c.finish() && abandoned != nil {
			abandoned()
		}
	}()
	return c, nil
}

// do runs fn with the storage timeout and returns its error, or
// ErrRootStalled when it did not return in time, or ctx's error.
func (g *guard) do(ctx context.Context, op string, fn func() error) error {
	return g.doUndo(ctx, op, fn, nil)
}

// doUndo is do with an abandoned hook (see start).
func (g *guard) doUndo(ctx context.Context, op string, fn func() error, abandoned func()) error {
	var err error
	c, serr := g.start(op, func() { err = fn() }, abandoned)
	if serr != nil {
		return serr
	}
	if werr := c.wait(ctx); werr != nil {
		return werr
	}
	return err
}

// wait waits for the call to return, for its deadline, or for ctx. A
// call that returned is never abandoned, even when its deadline passed
// meanwhile.
func (c *call) wait(ctx context.Context) error {
	var cause error
	select {
	case <-c.done:
		return nil
	case <-c.late:
		cause = nil
	case <-ctx.Done():
		cause = ctx.Err()
	}
	c.g.mu.Lock()
	if c.finished {
		c.g.mu.Unlock()
		<-c.done
		return nil
	}
	c.abandoned = true
	err := c.g.errLocked(c.op)
	c.g.mu.Unlock()
	if cause != nil {
		return fmt.Errorf("%s: %w", c.op, cause)
	}
	return err
}

// progress moves the call's deadline: a walk that keeps returning entries
// is not stuck, however long it takes in all. While paused (the caller
// handles an entry) it has none.
func (c *call) progress(paused bool) {
	c.g.mu.Lock()
	defer c.g.mu.Unlock()
	if c.overdue || c.finished {
		return
	}
	c.deadline = time.Now().Add(c.g.timeout)
	if paused {
		c.deadline = c.deadline.Add(100 * 365 * 24 * time.Hour)
	}
}

// expire is the call's timer: at the deadline the call goes overdue and
// the root is stalled.
func (c *call) expire() {
	g := c.g
	g.mu.Lock()
	if c.finished || c.overdue {
		g.mu.Unlock()
		return
	}
	if left := time.Until(c.deadline); left > 0 {
		c.timer.Reset(left)
		g.mu.Unlock()
		return
	}
	c.overdue = true
	g.overdue++
	first := g.overdue == 1
	if first {
		g.since = time.Now()
		g.stalls++
		close(g.begun)
		g.begun = make(chan struct{})
		g.stalled.Set(1)
	}
	g.timeouts.WithLabelValues(c.op).Inc()
	g.mu.Unlock()
	close(c.late)
	if first {
		log.L.WithField("root", g.root).WithField("op", c.op).WithField("storage_timeout", g.timeout).
			Error("SHARED ROOT NOT ANSWERING: calls on it fail as unavailable, and this node deletes and reaps nothing until it answers again")
	}
}

// finish records that fn returned, and reports whether the caller had
// stopped waiting.
func (c *call) finish() (abandoned bool) {
	g := c.g
	g.mu.Lock()
	c.finished = true
	c.timer.Stop()
	var stalledFor time.Duration
	if c.overdue {
		g.overdue--
		if g.overdue == 0 {
			stalledFor = time.Since(g.since)
			g.stalled.Set(0)
		}
	}
	abandoned = c.abandoned
	g.mu.Unlock()
	close(c.done)
	if stalledFor > 0 {
		log.L.WithField("root", g.root).WithField("stalled_for", stalledFor.Round(time.Millisecond)).
			Warn("shared root answers again: every stuck call has returned")
		if g.recovered != nil {
			go g.recovered()
		}
	}
	return abandoned
}

// refuse is nil unless the root is stalled; then it is the error of op.
func (g *guard) refuse(op string) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.overdue == 0 {
		return nil
	}
	return g.errLocked(op)
}

// errLocked is op's ErrRootStalled. The caller holds mu.
func (g *guard) errLocked(op string) error {
	prefix := ""
	if op != "" {
		prefix = op + ": "
	}
	if g.overdue == 0 {
		return fmt.Errorf("%s%w within %v: %s: %w", prefix, ErrRootStalled, g.timeout, g.root, errdefs.ErrUnavailable)
	}
	return fmt.Errorf("%s%w within %v: %s (%d calls stuck, the first for %v): %w", prefix, ErrRootStalled,
		g.timeout, g.root, g.overdue, time.Since(g.since).Round(time.Millisecond), errdefs.ErrUnavailable)
}

// stallsSince returns how many stalls have begun, and a channel closed
// when the next one begins.
func (g *guard) stallsSince() (uint64, <-chan struct{}) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.stalls, g.begun
}

// keptWhileStalled refuses a delete while the root is stalled: the blob
// is kept (the caller drops this node's reference, dropOwnRef), and a
// reaper whose root answers reclaims it. It returns the refusal, nil
// when the root is not stalled.
func (s *store) keptWhileStalled(ctx context.Context, dgst digest.Digest) error {
	err := s.guard.refuse("delete")
	if err == nil {
		return nil
	}
	s.metrics.deletes.WithLabelValues("stalled").Inc()
	log.G(ctx).WithError(err).WithField("digest", dgst).WithField("node", s.nodeID).
		Warn("blob kept: the shared root is not answering; a reaper whose root checks out reclaims it")
	return err
}

// moveToTrashBounded is moveToTrash under the storage timeout. A rename
// that lands after its caller gave up (the delete then counts as failed,
// and its lock is released so) is undone where it lands: the blob is put
// back at once rather than at the reaper's next pass.
func (s *store) moveToTrashBounded(ctx context.Context, dgst digest.Digest, fence uint64) (string, error) {
	var trashed string
	err := s.guard.doUndo(ctx, "delete_rename", func() (err error) {
		trashed, err = s.moveToTrash(dgst, fence)
		return err
	}, func() {
		if trashed == "" {
			return
		}
		put, err := restoreTrashed(s.root, trashed, dgst)
		l := log.L.WithField("digest", dgst).WithField("node", s.nodeID)
		if err != nil {
			l.WithError(err).Warn("a delete's rename landed after its deadline and putting the blob back failed; the reaper restores it")
			return
		}
		l.WithField("put_back", put).Info("a delete's rename landed after its deadline: the blob is back in place")
	})
	if err != nil {
		return "", err
	}
	return trashed, nil
}

// planReap is the reaper's plan, made only from a view of the root that
// did not stall: a stall since the last pass restarts the reaper's
// memory (no observation spans it), and a stall during the plan discards
// it. It returns the stalls seen, for noStallSince.
func (s *store) planReap(ctx context.Context) (ReapPlan, uint64, error) {
	stalls, begun := s.guard.stallsSince()
	if stalls != s.reapStalls {
		s.reaper.mem.forget()
		s.reapStalls = stalls
	}
	type result struct {
		plan ReapPlan
		err  error
	}
	// The plan reads the root directly; on a hung root it returns when
	// the root does, and its result is then discarded.
	ch := make(chan result, 1)
	go func() {
		p, err := PlanReap(ctx, s.root, s.coord, ReapOptions{Grace: s.reapGrace, Self: s.nodeID}, &s.reaper.mem)
		ch <- result{p, err}
	}()
	select {
	case r := <-ch:
		if err := s.noStallSince(stalls, "reaper: plan"); err != nil {
			return ReapPlan{}, stalls, err
		}
		return r.plan, stalls, r.err
	case <-begun:
		return ReapPlan{}, stalls, s.noStallSince(stalls, "reaper: plan")
	case <-ctx.Done():
		return ReapPlan{}, stalls, fmt.Errorf("reaper: plan: %w", ctx.Err())
	}
}

// noStallSince is nil while no stall has begun since stalls were counted.
func (s *store) noStallSince(stalls uint64, op string) error {
	if n, _ := s.guard.stallsSince(); n == stalls {
		return nil
	}
	if err := s.guard.refuse(op); err != nil {
		return fmt.Errorf("%w; nothing decided from this view", err)
	}
	return fmt.Errorf("%s: the shared root stalled meanwhile; nothing decided from this view: %w: %w", op, ErrRootStalled, errdefs.ErrUnavailable)
}

// forget restarts every observation.
func (m *ReapMemory) forget() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.dangling, m.markers = nil, nil
}
