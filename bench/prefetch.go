package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/containerd/containerd/v2/core/remotes/docker"

	"github.com/sharedcontent/sharedcontent/contentv2"
	"github.com/sharedcontent/sharedcontent/contentv2/remote"
	"github.com/sharedcontent/sharedcontent/internal/prefetch"
	"github.com/sharedcontent/sharedcontent/internal/testutil/registry"
	"github.com/sharedcontent/sharedcontent/lockclient"
)

// prefetchNodes is the prefetch section's node count.
const prefetchNodes = 3

// prefetchResult is the prefetch section (docs/design.md §5.9): N nodes
// pulling an image cold, and after `sharedcontentctl prefetch` put it in
// the shared root (as the command does: a library-mode store under the
// pull locks, then the node forgotten).
type prefetchResult struct {
	// Cold and Warm are the nodes' pulls, without and after a prefetch.
	Cold, Warm dedupResult
	// Prefetch is the prefetch's own median wall and most registry bytes.
	Prefetch      time.Duration
	PrefetchBytes int64
}

// prefetchBench pulls img with prefetchNodes fresh nodes, cold and after
// a prefetch, reps times each.
func prefetchBench(reg *registry.Registry, img registry.Image, reps int, progress func(string)) (prefetchResult, error) {
	res := prefetchResult{Cold: dedupResult{Setup: "cold", Nodes: prefetchNodes}, Warm: dedupResult{Setup: "prefetched", Nodes: prefetchNodes}}
	var prefetches []time.Duration
	for r := range reps {
		for _, d := range []*dedupResult{&res.Cold, &res.Warm} {
			progress(fmt.Sprintf("prefetch: %d nodes, %s, run %d/%d", prefetchNodes, d.Setup, r+1, reps))
			open := sharedNodes
			if d == &res.Warm {
				open = func(ctx context.Context, dir string, n int) ([]pullNode, func(), error) {
					took, bytes, nodes, stop, err := prefetchedNodes(ctx, reg, img, dir, n)
					prefetches = append(prefetches, took)
					res.PrefetchBytes = max(res.PrefetchBytes, bytes)
					return nodes, stop, err
				}
			}
			run, err := pullOnceWith(reg, img, d.Setup, prefetchNodes, open)
			if err != nil {
				return res, err
			}
			d.Bytes = max(d.Bytes, run.bytes)
			d.MaxGets = max(d.MaxGets, run.maxGets)
			d.Walls = append(d.Walls, run.wall)
		}
	}
	res.Cold.Wall, res.Warm.Wall = medianDuration(res.Cold.Walls), medianDuration(res.Warm.Walls)
	res.Prefetch = medianDuration(prefetches)
	return res, nil
}

// prefetchedNodes starts a coordinator, prefetches img into the shared
// root under dir, ends the prefetch's node as the command does, and opens
// n nodes; it returns the prefetch's wall time and registry bytes.
func prefetchedNodes(ctx context.Context, reg *registry.Registry, img registry.Image, dir string, n int) (time.Duration, int64, []pullNode, func(), error) {
	url, stopCoordinator, err := startCoordinator(dir)
	if err != nil {
		return 0, 0, nil, nil, err
	}
	reg.ResetCounters()
	took, err := prefetchInto(ctx, url, filepath.Join(dir, "shared"), filepath.Join(dir, "prefetch"), img.Ref)
	if err != nil {
		stopCoordinator()
		return 0, 0, nil, nil, err
	}
	bytes := reg.BlobBytes()
	nodes, stopNodes, err := openSharedNodes(ctx, dir, url, n)
	if err != nil {
		stopCoordinator()
		return 0, 0, nil, nil, err
	}
	return took, bytes, nodes, func() { stopNodes(); stopCoordinator() }, nil
}

// prefetchInto prefetches ref into root as node "prefetch" and forgets
// the node, as sharedcontentctl prefetch --no-pin does.
func prefetchInto(ctx context.Context, url, root, state, ref string) (time.Duration, error) {
	if err := os.MkdirAll(state, 0o700); err != nil {
		return 0, err
	}
	c, err := lockclient.New(url, lockclient.WithNodeID("prefetch"))
	if err != nil {
		return 0, err
	}
	defer c.Close()
	cs, err := contentv2.NewStore(root, "prefetch", remote.New(c), contentv2.WithMode(contentv2.LibraryMode), contentv2.WithStateDir(state))
	if err != nil {
		return 0, err
	}
	resolver := docker.NewResolver(docker.ResolverOptions{Hosts: docker.ConfigureDefaultRegistries(docker.WithPlainHTTP(docker.MatchAllHosts))})
	start := time.Now()
	_, err = prefetch.Fetch(ctx, cs, resolver, ref, prefetch.Options{})
	took := time.Since(start)
	cs.Close()
	if err != nil {
		return 0, err
	}
	return took, c.Forget(ctx, "prefetch")
}
