// Command sharedcontent-demo runs the main job end to end with nothing to
// install: an in-process OCI registry holding a generated image, the
// embedded coordinator, and N containerd nodes (containerd's metadata store
// over a contentv2 store) sharing one temporary content directory. Every
// node pulls the image at once; the demo shows live progress and ends with
// how often each blob was downloaded.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/containerd/containerd/v2/core/content"
	"github.com/containerd/log"
	"github.com/opencontainers/go-digest"

	"github.com/sharedcontent/sharedcontent/contentv2"
	"github.com/sharedcontent/sharedcontent/integration/cluster"
	"github.com/sharedcontent/sharedcontent/integration/registry"
	"github.com/sharedcontent/sharedcontent/lockclient"
	"github.com/sharedcontent/sharedcontent/lockserver"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "sharedcontent-demo:", err)
		os.Exit(1)
	}
}

func run() error {
	nodes := flag.Int("nodes", 3, "number of nodes sharing the content directory")
	layers := flag.Int("layers", 6, "image layers")
	layerMiB := flag.Int("layer-mib", 16, "size of each layer in MiB")
	bandwidth := flag.Int("bandwidth-mbps", 400, "registry uplink in MB/s, shared by all downloads (0: unlimited)")
	flag.Parse()
	if *nodes < 1 || *layers < 1 || *layerMiB < 1 {
		return errors.New("--nodes, --layers and --layer-mib must be positive")
	}
	log.SetLevel("error")
	ctx := cluster.Context(context.Background())

	dir, err := os.MkdirTemp("", "sharedcontent-demo-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)

	var ropts []registry.Option
	if *bandwidth > 0 {
		ropts = append(ropts, registry.WithBandwidth(*bandwidth*1_000_000))
	}
	reg, err := registry.Start(ropts...)
	if err != nil {
		return err
	}
	defer reg.Close()
	fmt.Printf("generating a %d × %d MiB image in the registry at %s ...\n", *layers, *layerMiB, reg.Host)
	img, err := reg.PushRandom(ctx, "demo/app:latest", *layers, int64(*layerMiB)<<20)
	if err != nil {
		return err
	}
	reg.ResetCounters()

	srv, err := lockserver.OpenServer(lockserver.ServerConfig{Config: lockserver.DefaultConfig(), DataDir: dir + "/coordinator"})
	if err != nil {
		return err
	}
	defer srv.Shutdown(context.Background())

	root := dir + "/shared"
	ns := make([]*cluster.Node, *nodes)
	for i := range ns {
		id := fmt.Sprintf("node-%d", i+1)
		state := fmt.Sprintf("%s/%s", dir, id)
		if err := os.MkdirAll(state, 0o700); err != nil {
			return err
		}
		client, err := lockclient.NewEmbedded(srv.Locker, lockclient.WithNodeID(id))
		if err != nil {
			return err
		}
		n, err := cluster.NewNode(ctx, id, root, state, contentv2.LockService(client))
		if err != nil {
			return err
		}
		defer n.Close()
		ns[i] = n
	}

	fmt.Printf("pulling %s (%s) on %d nodes sharing %s\n\n", img.Ref, mib(img.Size()), len(ns), root)
	received := make([]atomic.Int64, len(ns))
	errs := make([]error, len(ns))
	took := make([]time.Duration, len(ns))
	start := time.Now()
	var wg sync.WaitGroup
	for i, n := range ns {
		wg.Go(func() {
			_, errs[i] = cluster.Pull(ctx, n.CS, img.Ref, cluster.PullOptions{Received: &received[i]})
			took[i] = time.Since(start)
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	progress := time.NewTicker(250 * time.Millisecond)
	defer progress.Stop()
	for running := true; running; {
		select {
		case <-done:
			running = false
		case <-progress.C:
		}
		var parts []string
		for i, n := range ns {
			parts = append(parts, fmt.Sprintf("%s %7s", n.ID, mib(received[i].Load())))
		}
		fmt.Printf("\r%5.1fs  downloaded: %s  | registry sent %s   ", time.Since(start).Seconds(), strings.Join(parts, "  "), mib(reg.BlobBytes()))
	}
	wall := time.Since(start)
	fmt.Print("\n\n")
	for i, err := range errs {
		if err != nil {
			return fmt.Errorf("%s: pull failed: %w", ns[i].ID, err)
		}
	}
	for _, n := range ns {
		for _, d := range img.Descriptors() {
			b, err := content.ReadBlob(ctx, n.CS, d)
			if err != nil {
				return fmt.Errorf("%s cannot read %s: %w", n.ID, d.Digest, err)
			}
			if digest.FromBytes(b) != d.Digest {
				return fmt.Errorf("%s: blob %s is corrupt", n.ID, d.Digest)
			}
		}
	}

	gets := reg.BlobGets()
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "blob\tkind\tsize\tdownloads\tnodes that have it\t")
	for i, d := range img.Descriptors() {
		kind := [...]string{"manifest", "config"}[min(i, 1)]
		if i > 1 {
			kind = "layer"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d/%d\t\n", d.Digest.Encoded()[:12], kind, mib(d.Size), gets[d.Digest.String()], len(ns), len(ns))
	}
	tw.Flush()
	uncoordinated := img.Size() * int64(len(ns))
	fmt.Printf("\nregistry bytes: %s with sharedcontent vs %s for %d uncoordinated pulls (%.2f× the image, %.1f× less egress)\n",
		mib(reg.BlobBytes()), mib(uncoordinated), len(ns), float64(reg.BlobBytes())/float64(img.Size()), float64(uncoordinated)/float64(max(reg.BlobBytes(), 1)))
	sort.Slice(took, func(i, j int) bool { return took[i] < took[j] })
	fmt.Printf("wall time: %s for all %d nodes to have the image (first node done at %s)\n",
		wall.Round(time.Millisecond), len(ns), took[0].Round(time.Millisecond))
	return nil
}

func mib(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }
