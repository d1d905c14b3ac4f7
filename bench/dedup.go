package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/containerd/containerd/v2/core/content"
	"github.com/containerd/containerd/v2/core/metadata"
	"github.com/containerd/containerd/v2/plugins/content/local"
	bolt "go.etcd.io/bbolt"

	"github.com/sharedcontent/sharedcontent/contentv2/contentv2test"
	"github.com/sharedcontent/sharedcontent/contentv2/remote"
	"github.com/sharedcontent/sharedcontent/internal/testutil/registry"
	"github.com/sharedcontent/sharedcontent/lockclient"
	"github.com/sharedcontent/sharedcontent/lockserver"
	"github.com/sharedcontent/sharedcontent/lockserver/httpserver"
)

// dedupResult is one setup pulling with n nodes, over its repetitions.
type dedupResult struct {
	Setup string // "sharedcontent" or "uncoordinated"
	Nodes int
	// Bytes is the most registry blob bytes of any repetition.
	Bytes int64
	// Wall is the median time until every node had the image.
	Wall  time.Duration
	Walls []time.Duration
	// Transfer is the median time until the registry sent its last byte;
	// Wall - Transfer is time spent only waiting.
	Transfer time.Duration
	// Gets is the most GETs of any one blob in any repetition.
	MaxGets int
}

// pullNode is what a pull needs of a node: containerd's metadata content
// view, and a way to close it.
type pullNode struct {
	cs    content.Store
	close func() error
}

// sharedNodes opens n sharedcontent nodes on one shared root, each with
// its own lockclient to a coordinator on loopback (HTTP), in containerd
// mode (the plugin's default).
func sharedNodes(ctx context.Context, dir string, n int) ([]pullNode, func(), error) {
	url, stopCoordinator, err := startCoordinator(dir)
	if err != nil {
		return nil, nil, err
	}
	nodes, stopNodes, err := openSharedNodes(ctx, dir, url, n)
	if err != nil {
		stopCoordinator()
		return nil, nil, err
	}
	return nodes, func() { stopNodes(); stopCoordinator() }, nil
}

// startCoordinator serves a coordinator on loopback (HTTP), its data under
// dir, until stop.
func startCoordinator(dir string) (url string, stop func(), err error) {
	srv, err := httpserver.Open(httpserver.Config{Config: lockserver.DefaultConfig(), DataDir: filepath.Join(dir, "coordinator")})
	if err != nil {
		return "", nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	go srv.Serve(ln)
	return "http://" + ln.Addr().String(), func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
	}, nil
}

// openSharedNodes opens n nodes on dir's shared root, coordinated by url.
func openSharedNodes(ctx context.Context, dir, url string, n int) ([]pullNode, func(), error) {
	var nodes []pullNode
	var clients []*lockclient.Client
	stop := func() {
		for _, n := range nodes {
			n.close()
		}
		for _, c := range clients {
			c.Close()
		}
	}
	for i := range n {
		id := fmt.Sprintf("node-%d", i+1)
		state := filepath.Join(dir, id)
		if err := os.MkdirAll(state, 0o700); err != nil {
			stop()
			return nil, nil, err
		}
		c, err := lockclient.New(url, lockclient.WithNodeID(id))
		if err != nil {
			stop()
			return nil, nil, err
		}
		clients = append(clients, c)
		node, err := contentv2test.NewNode(ctx, id, filepath.Join(dir, "shared"), state, remote.New(c))
		if err != nil {
			stop()
			return nil, nil, err
		}
		nodes = append(nodes, pullNode{cs: node.CS, close: node.Close})
	}
	return nodes, stop, nil
}

// uncoordinatedNodes opens n stock nodes: containerd's metadata store over
// containerd's local content store, each in its own directory.
func uncoordinatedNodes(ctx context.Context, dir string, n int) ([]pullNode, func(), error) {
	var nodes []pullNode
	stop := func() {
		for _, n := range nodes {
			n.close()
		}
	}
	for i := range n {
		state := filepath.Join(dir, fmt.Sprintf("node-%d", i+1))
		cs, err := local.NewStore(filepath.Join(state, "content"))
		if err != nil {
			stop()
			return nil, nil, err
		}
		db, err := bolt.Open(filepath.Join(state, "meta.db"), 0o600, nil)
		if err != nil {
			stop()
			return nil, nil, err
		}
		mdb := metadata.NewDB(db, cs, nil)
		if err := mdb.Init(ctx); err != nil {
			db.Close()
			stop()
			return nil, nil, err
		}
		nodes = append(nodes, pullNode{cs: mdb.ContentStore(), close: db.Close})
	}
	return nodes, stop, nil
}

type dedupRun struct {
	bytes    int64
	wall     time.Duration
	transfer time.Duration
	maxGets  int
}

// openNodes opens n fresh nodes of a setup under dir, with a function
// that stops them.
type openNodes func(ctx context.Context, dir string, n int) ([]pullNode, func(), error)

// pullOnce has n fresh nodes of one setup pull img at once.
func pullOnce(reg *registry.Registry, img registry.Image, setup string, n int) (dedupRun, error) {
	open := sharedNodes
	if setup == "uncoordinated" {
		open = uncoordinatedNodes
	}
	return pullOnceWith(reg, img, setup, n, open)
}

// pullOnceWith is pullOnce with the nodes open opens; the registry's
// counters start after it.
func pullOnceWith(reg *registry.Registry, img registry.Image, setup string, n int, open openNodes) (dedupRun, error) {
	ctx := contentv2test.Context(context.Background())
	dir, err := os.MkdirTemp("", "bench-dedup-")
	if err != nil {
		return dedupRun{}, err
	}
	defer os.RemoveAll(dir)
	nodes, stop, err := open(ctx, dir, n)
	if err != nil {
		return dedupRun{}, err
	}
	defer stop()
	reg.ResetCounters()

	// The registry's last byte: the download is over, anything after it is
	// waiting.
	var lastByte atomic.Int64
	start := time.Now()
	samplerDone := make(chan struct{})
	var sampler sync.WaitGroup
	sampler.Go(func() {
		prev := int64(0)
		t := time.NewTicker(2 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-samplerDone:
				return
			case <-t.C:
				if b := reg.BlobBytes(); b != prev {
					prev = b
					lastByte.Store(int64(time.Since(start)))
				}
			}
		}
	})
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i, node := range nodes {
		wg.Go(func() {
			_, errs[i] = contentv2test.Pull(ctx, node.cs, img.Ref, contentv2test.PullOptions{})
		})
	}
	wg.Wait()
	wall := time.Since(start)
	close(samplerDone)
	sampler.Wait()
	if err := errors.Join(errs...); err != nil {
		return dedupRun{}, fmt.Errorf("%s pull with %d nodes: %w", setup, n, err)
	}
	// Every node's own metadata has every blob (containerd verified the
	// digests at commit).
	for i, node := range nodes {
		for _, d := range img.Descriptors() {
			info, err := node.cs.Info(ctx, d.Digest)
			if err != nil || info.Size != d.Size {
				return dedupRun{}, fmt.Errorf("%s node %d lacks %s after the pull: %v", setup, i+1, d.Digest, err)
			}
		}
	}
	run := dedupRun{bytes: reg.BlobBytes(), wall: wall, transfer: time.Duration(lastByte.Load())}
	for _, g := range reg.BlobGets() {
		run.maxGets = max(run.maxGets, g)
	}
	return run, nil
}

// dedupBench pulls with every node count in both setups. sharedReps and
// plainReps are the repetitions of each (the uncoordinated pulls are
// bandwidth-bound and barely vary).
//
// With profilePath set, the sharedcontent pulls run under the CPU profiler.
func dedupBench(reg *registry.Registry, img registry.Image, counts []int, sharedReps, plainReps int, profilePath string, progress func(string)) ([]dedupResult, error) {
	var out []dedupResult
	for _, setup := range []string{"sharedcontent", "uncoordinated"} {
		reps := sharedReps
		stopProfile := func() {}
		if setup == "uncoordinated" {
			reps = plainReps
		} else if profilePath != "" {
			var err error
			if stopProfile, err = startProfile(profilePath); err != nil {
				return nil, err
			}
		}
		for _, n := range counts {
			res := dedupResult{Setup: setup, Nodes: n}
			var transfers []time.Duration
			for r := range reps {
				progress(fmt.Sprintf("dedup: %s, %d nodes, run %d/%d", setup, n, r+1, reps))
				run, err := pullOnce(reg, img, setup, n)
				if err != nil {
					stopProfile()
					return nil, err
				}
				res.Bytes = max(res.Bytes, run.bytes)
				res.MaxGets = max(res.MaxGets, run.maxGets)
				res.Walls = append(res.Walls, run.wall)
				transfers = append(transfers, run.transfer)
			}
			res.Wall = medianDuration(res.Walls)
			res.Transfer = medianDuration(transfers)
			out = append(out, res)
		}
		stopProfile()
	}
	return out, nil
}

func medianDuration(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[(len(s)-1)/2]
}
