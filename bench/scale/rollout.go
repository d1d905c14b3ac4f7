package scale

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/opencontainers/go-digest"

	"github.com/sharedcontent/sharedcontent/lockserver/api"
)

// RolloutResult is one rollout: every node pulls the same image at once.
type RolloutResult struct {
	Nodes, Blobs int
	// Wall is from the start until the last node has every blob;
	// Downloaded until the last holder unlocked.
	Wall, Downloaded time.Duration
	// Wake: from the holder's unlock (sent) until a waiter the
	// coordinator had queued (its answer to /lock said "queued") read
	// its outcome (noteSkip).
	WakeP50, WakeP99 time.Duration
	WakeSamples      int // 0: no waiter was woken
	// The wake-ups split by how the outcome reached the waiter: on its
	// node's event stream (Streamed), or through /lock/status because
	// the stream came up only after the outcome (Checked; lockclient
	// opens a node's stream with its first wait, so at a rollout's start
	// every node opens one at once).
	StreamedP99, CheckedP99         time.Duration
	StreamedSamples, CheckedSamples int
	// Late: from the holder's unlock to the answer "skip" of a lock
	// request sent before the unlock but answered at once, after it (the
	// coordinator had not read it yet): the request's own latency.
	LateP50, LateP99 time.Duration
	LateSamples      int
	// Parts of a wake-up: Unlock, the holder's unlock request (sent to
	// answered); Fanout, from the unlock's answer to the waiter's read
	// of its outcome (the coordinator's write and the simulator's read:
	// negative when read before the holder had its answer); Dispatch,
	// from that read until Lock returned (lockclient's parse and
	// hand-over and the simulator's scheduling; not in Wake).
	UnlockP50, UnlockP99 time.Duration
	// UnlockBehind counts the unlocks sent while their node's short
	// connection(s) carried other requests of the node: an unlock takes
	// a connection of its own (node.go), as lockclient would open one,
	// instead of waiting for those.
	UnlockBehind int64
	// UnlockFailed counts the holders' unlocks that failed (UnlockErr
	// the first): their blob's waiters wait for the lease to expire. A
	// node without a live session is refused (docs/design.md §8.4); the
	// simulated nodes keep theirs as their daemons do (session.go).
	UnlockFailed             int64
	UnlockErr                string
	FanoutP50, FanoutP99     time.Duration
	DispatchP50, DispatchP99 time.Duration
	// Done: per node, from the start until it has every blob (over the
	// nodes that finished).
	DoneP50, DoneP99 time.Duration
	Unfinished       int
	// Downloads counts the holders that downloaded each blob.
	Downloads []int64
	// Retries counts pulls (lock calls) and reference adds that failed
	// and were tried again.
	Retries int64
	Usage
}

// CPUPerNodeBlob is the coordinator's CPU per node and blob.
func (r RolloutResult) CPUPerNodeBlob() time.Duration {
	return r.CPU / time.Duration(max(1, r.Nodes*r.Blobs))
}

// image is the rollout's shared state: its blobs and what happened to
// each.
type image struct {
	blobs     []digest.Digest
	unlockAt  []atomic.Int64 // unix ns when the holder unlocked
	unlocked  []atomic.Int64 // unix ns when the holder's unlock was answered
	downloads []atomic.Int64
	wakes     samples
	streamed  samples // the wakes read from the node's event stream
	checked   samples // the wakes answered by /lock/status
	late      samples
	unlock    samples
	fanout    samples
	dispatch  samples
	retries   atomic.Int64
	behind    atomic.Int64 // unlocks sent behind their node's requests
	// unlockFailed counts the unlocks that failed, unlockErr the first.
	unlockFailed atomic.Int64
	unlockErr    atomic.Pointer[string]
}

func newImage(blobs int) *image {
	img := &image{unlockAt: make([]atomic.Int64, blobs), unlocked: make([]atomic.Int64, blobs), downloads: make([]atomic.Int64, blobs)}
	salt := randomHex(8)
	for j := range blobs {
		img.blobs = append(img.blobs, digest.FromString(fmt.Sprintf("scale-blob-%s-%d", salt, j)))
	}
	return img
}

// rollout runs one rollout against a fresh coordinator.
func rollout(cfg Config, nodes int) (RolloutResult, error) {
	res := RolloutResult{Nodes: nodes, Blobs: cfg.Blobs}
	env, err := setUp(cfg, nodes, nil)
	if err != nil {
		return res, err
	}
	defer env.tearDown()
	img := newImage(cfg.Blobs)
	m := env.begin()
	stopProfile := profile(cfg, fmt.Sprintf("rollout-%d", nodes), env.coord.pid())
	ctx, cancel := context.WithTimeout(context.Background(), cfg.Deadline)
	defer cancel()
	var done samples
	var wg sync.WaitGroup
	start := time.Now()
	for _, n := range env.fleet.nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if n.pullImage(ctx, cfg, img) {
				done.add(time.Since(start))
			}
		}()
	}
	wg.Wait()
	res.Wall = time.Since(start)
	stopProfile()
	env.end(m)
	res.Usage = m.Usage
	q, n := done.quantiles(0.5, 0.99)
	res.DoneP50, res.DoneP99, res.Unfinished = q[0], q[1], nodes-n
	q, res.WakeSamples = img.wakes.quantiles(0.5, 0.99)
	res.WakeP50, res.WakeP99 = q[0], q[1]
	q, res.StreamedSamples = img.streamed.quantiles(0.99)
	res.StreamedP99 = q[0]
	q, res.CheckedSamples = img.checked.quantiles(0.99)
	res.CheckedP99 = q[0]
	q, res.LateSamples = img.late.quantiles(0.5, 0.99)
	res.LateP50, res.LateP99 = q[0], q[1]
	q, _ = img.unlock.quantiles(0.5, 0.99)
	res.UnlockP50, res.UnlockP99 = q[0], q[1]
	q, _ = img.fanout.quantiles(0.5, 0.99)
	res.FanoutP50, res.FanoutP99 = q[0], q[1]
	q, _ = img.dispatch.quantiles(0.5, 0.99)
	res.DispatchP50, res.DispatchP99 = q[0], q[1]
	for j := range img.downloads {
		res.Downloads = append(res.Downloads, img.downloads[j].Load())
	}
	res.Retries = img.retries.Load()
	res.UnlockBehind = img.behind.Load()
	res.UnlockFailed = img.unlockFailed.Load()
	if e := img.unlockErr.Load(); e != nil {
		res.UnlockErr = *e
	}
	for j := range img.unlockAt {
		if at := img.unlockAt[j].Load(); at != 0 {
			res.Downloaded = max(res.Downloaded, time.Unix(0, at).Sub(start))
		}
	}
	return res, m.err
}

// pullImage pulls every blob of img, cfg.Parallel at a time (containerd's
// default max_concurrent_downloads is 3), in the image's order; false if
// ctx ended first.
func (n *node) pullImage(ctx context.Context, cfg Config, img *image) bool {
	sem := make(chan struct{}, cfg.Parallel)
	var wg sync.WaitGroup
	var failed atomic.Bool
	for j := range img.blobs {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			if !n.pullBlob(ctx, cfg, img, j) {
				failed.Store(true)
			}
		}()
	}
	wg.Wait()
	return !failed.Load()
}

// pullBlob takes blob j's pull lock (waiting), downloads it if it holds
// the lock, and adds its reference; failures are retried after a pause
// until ctx ends.
func (n *node) pullBlob(ctx context.Context, cfg Config, img *image, j int) bool {
	blob := img.blobs[j].String()
	for {
		asked := time.Now()
		lctx, cancel := context.WithTimeout(ctx, cfg.LockTimeout)
		res, err := n.client.Lock(lctx, api.LockRequest{Type: api.OperationPull, ResourceID: blob})
		cancel()
		got := time.Now()
		if err != nil {
			if !pause(ctx, cfg.RetryPause, &img.retries) {
				return false
			}
			continue
		}
		if res.Acquired {
			img.downloads[j].Add(1)
			time.Sleep(cfg.Download)
			if n.short.hc.PendingRequests() >= cfg.ShortConns {
				img.behind.Add(1)
			}
			sent := time.Now()
			img.unlockAt[j].Store(sent.UnixNano())
			// A failed unlock leaves the lease to expire: the blob is
			// here all the same.
			if err := n.client.Unlock(ctx, res.Lease, true, nil); err == nil {
				answered := time.Now()
				img.unlocked[j].Store(answered.UnixNano())
				img.unlock.add(answered.Sub(sent))
			} else {
				img.unlockFailed.Add(1)
				msg := fmt.Sprintf("node %s, blob %d: %v", n.id, j, err)
				img.unlockErr.CompareAndSwap(nil, &msg)
			}
		} else {
			img.noteSkip(n, j, asked, got)
		}
		break
	}
	for {
		if _, err := n.client.AddRef(ctx, blob); err == nil {
			break
		}
		if !pause(ctx, cfg.RetryPause, &img.retries) {
			return false
		}
	}
	n.addToJournal(img.blobs[j])
	return true
}

// noteSkip records the wake-up of node n told to skip blob j: asked
// when it sent its lock request, got when Lock returned. A waiter the
// coordinator queued is woken when its outcome is read from its event
// stream (timed there, before lockclient and the simulator's scheduling
// handle it: dispatch measures those), or, if its stream came up after the
// outcome, when /lock/status answered it. A lock request sent before the
// unlock but answered "skip" at once was not woken: its time is the
// request's own latency (late).
func (img *image) noteSkip(n *node, j int, asked, got time.Time) {
	blob := img.blobs[j].String()
	queued := n.short.queued.take(blob)
	read, seen := n.stream.seen.take(blob)
	at := img.unlockAt[j].Load()
	if at == 0 || asked.UnixNano() >= at {
		return // asked after the unlock: answered at once
	}
	unlockAt := time.Unix(0, at)
	switch {
	case !queued:
		img.late.add(got.Sub(unlockAt))
	case seen && read.Before(got):
		img.wakes.add(read.Sub(unlockAt))
		img.streamed.add(read.Sub(unlockAt))
		img.dispatch.add(got.Sub(read))
		if u := img.unlocked[j].Load(); u != 0 {
			img.fanout.add(read.Sub(time.Unix(0, u)))
		}
	default:
		img.wakes.add(got.Sub(unlockAt))
		img.checked.add(got.Sub(unlockAt))
	}
}

// pause counts a retry and waits about d (jittered ±50%); false when ctx
// ends first.
func pause(ctx context.Context, d time.Duration, retries *atomic.Int64) bool {
	retries.Add(1)
	select {
	case <-ctx.Done():
		return false
	case <-time.After(d/2 + rand.N(d)):
		return true
	}
}
