package scale

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/opencontainers/go-digest"

	"github.com/sharedcontent/sharedcontent/lockclient"
	"github.com/sharedcontent/sharedcontent/lockserver/api"
)

// RolloutResult is one rollout: every node pulls the same image at once.
type RolloutResult struct {
	Nodes, Blobs int
	// Wall is from the start until the last node has every blob;
	// Downloaded until the last holder unlocked.
	Wall, Downloaded time.Duration
	// Wake: from the holder's unlock to a waiter's skip, for waiters
	// that asked before the unlock.
	WakeP50, WakeP99 time.Duration
	WakeSamples      int // 0: no waiter was woken
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
	downloads []atomic.Int64
	wakes     samples
	retries   atomic.Int64
}

func newImage(blobs int) *image {
	img := &image{unlockAt: make([]atomic.Int64, blobs), downloads: make([]atomic.Int64, blobs)}
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
	env.end(m)
	res.Usage = m.Usage
	q, n := done.quantiles(0.5, 0.99)
	res.DoneP50, res.DoneP99, res.Unfinished = q[0], q[1], nodes-n
	q, res.WakeSamples = img.wakes.quantiles(0.5, 0.99)
	res.WakeP50, res.WakeP99 = q[0], q[1]
	for j := range img.downloads {
		res.Downloads = append(res.Downloads, img.downloads[j].Load())
	}
	res.Retries = img.retries.Load()
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
		res, err := n.client.Lock(lctx, lockclient.LockRequest{Type: api.OperationPull, ResourceID: blob})
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
			img.unlockAt[j].Store(time.Now().UnixNano())
			// A failed unlock leaves the lease to expire: the blob is
			// here all the same.
			_ = n.client.Unlock(ctx, res.Lease, true, nil)
		} else if at := img.unlockAt[j].Load(); at != 0 && asked.UnixNano() < at {
			img.wakes.add(got.Sub(time.Unix(0, at)))
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
