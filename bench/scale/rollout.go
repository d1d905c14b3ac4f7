package scale

import (
	"cmp"
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/opencontainers/go-digest"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// RolloutResult is one rollout: every node pulls the same image at once.
type RolloutResult struct {
	Nodes, Blobs int
	// OldNodes of the Nodes are older nodes (Config.OldNodes).
	OldNodes int
	// SkipRef: the stores' followers asked for their references with
	// their skips (contentv2.WithSkipAddsRef).
	SkipRef bool
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
	StreamedP50, StreamedP99        time.Duration
	CheckedP50, CheckedP99          time.Duration
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
	// Retries counts fetches that failed and were tried again (as the
	// kubelet pulls the image again).
	Retries int64
	// StuckFirst and StuckLast list the commonest first and last errors
	// of the fetches that never finished, "count× error" (stuck.go).
	StuckFirst, StuckLast []string
	// Acts is what the nodes' contentv2 stores did.
	Acts Acts
	Usage
}

// NodesLabel is the node count, with the older nodes among them.
func (r RolloutResult) NodesLabel() string {
	if r.OldNodes == 0 {
		return strconv.Itoa(r.Nodes)
	}
	return fmt.Sprintf("%d (%d older)", r.Nodes, r.OldNodes)
}

// Duplicates counts the downloads beyond one per blob.
func (r RolloutResult) Duplicates() int64 {
	var n int64
	for _, d := range r.Downloads {
		n += max(0, d-1)
	}
	return n
}

// CPUPerNodeBlob is the coordinator's CPU per node and blob.
func (r RolloutResult) CPUPerNodeBlob() time.Duration {
	return r.CPU / time.Duration(max(1, r.Nodes*r.Blobs))
}

// image is the rollout's shared state: its blobs and what happened to
// each.
type image struct {
	blobs     []digest.Digest
	descs     []ocispec.Descriptor
	data      [][]byte
	index     map[string]int // by digest
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
	stuck     stuckFetches
	behind    atomic.Int64 // unlocks sent behind their node's requests
	// unlockFailed counts the unlocks that failed, unlockErr the first.
	unlockFailed atomic.Int64
	unlockErr    atomic.Pointer[string]
}

// newImage returns an image of blobs blobs of size bytes each, new
// content at every call.
func newImage(blobs, size int) *image {
	img := &image{unlockAt: make([]atomic.Int64, blobs), unlocked: make([]atomic.Int64, blobs), downloads: make([]atomic.Int64, blobs),
		index: map[string]int{}}
	salt := randomHex(8)
	for j := range blobs {
		data := blobData(salt, j, size)
		d := ocispec.Descriptor{MediaType: ocispec.MediaTypeImageLayerGzip, Digest: digest.FromBytes(data), Size: int64(len(data))}
		img.blobs, img.descs, img.data = append(img.blobs, d.Digest), append(img.descs, d), append(img.data, data)
		img.index[d.Digest.String()] = j
	}
	return img
}

// rollout runs one rollout against a fresh coordinator.
func rollout(cfg Config, nodes int, skipRef bool) (RolloutResult, error) {
	res := RolloutResult{Nodes: nodes, Blobs: cfg.Blobs, OldNodes: cfg.olderNodes, SkipRef: skipRef}
	env, err := setUpStores(cfg, nodes, skipRef)
	if err != nil {
		return res, err
	}
	defer env.tearDown()
	img := newImage(cfg.Blobs, cfg.BlobSize)
	for _, n := range env.fleet.nodes {
		n.img.Store(img)
		n.resetActs()
	}
	m := env.begin()
	stopProfile := profile(cfg, fmt.Sprintf("rollout-%d-skipref-%s", nodes, onOff(skipRef)), env.coord.pid())
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
	q, res.StreamedSamples = img.streamed.quantiles(0.5, 0.99)
	res.StreamedP50, res.StreamedP99 = q[0], q[1]
	q, res.CheckedSamples = img.checked.quantiles(0.5, 0.99)
	res.CheckedP50, res.CheckedP99 = q[0], q[1]
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
	res.StuckFirst, res.StuckLast = img.stuck.top(5)
	if a, err := acts(env.fleet.nodes); err != nil && m.err == nil {
		m.err = err
	} else {
		res.Acts = a
	}
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

func onOff(on bool) string {
	if on {
		return "on"
	}
	return "off"
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

// pullBlob fetches blob j as containerd does (fetch.go) and counts
// whether this node downloaded it; a fetch that fails is tried again
// after a pause, as the kubelet pulls the image again, until ctx ends.
func (n *node) pullBlob(ctx context.Context, cfg Config, img *image, j int) bool {
	var first error
	for {
		downloaded, err := n.fetch(ctx, cfg, img.descs[j], img.data[j])
		if downloaded {
			img.downloads[j].Add(1)
		}
		if err == nil {
			return true
		}
		first = cmp.Or(first, err)
		if !pause(ctx, cfg.RetryPause, &img.retries) {
			img.stuck.note(first, err)
			return false
		}
	}
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
