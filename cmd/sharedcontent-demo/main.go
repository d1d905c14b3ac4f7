// Command sharedcontent-demo runs the main job end to end with nothing to
// install: an in-process OCI registry holding a generated image, the
// embedded coordinator, and N containerd nodes (containerd's metadata store
// over a contentv2 store) sharing one temporary content directory. Every
// node pulls the image at once; the demo shows live progress and how often
// each blob was downloaded (once). Then the second promise: the first node
// removes the image and runs containerd's garbage collection, and every
// other node still reads every blob, whose files stay in the shared
// directory.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/containerd/containerd/v2/core/content"
	"github.com/containerd/errdefs"
	"github.com/containerd/log"
	"github.com/opencontainers/go-digest"

	"github.com/sharedcontent/sharedcontent/cmd/internal/cli"
	"github.com/sharedcontent/sharedcontent/contentv2/contentv2test"
	"github.com/sharedcontent/sharedcontent/contentv2/remote"
	"github.com/sharedcontent/sharedcontent/internal/testutil/registry"
	"github.com/sharedcontent/sharedcontent/lockclient"
	"github.com/sharedcontent/sharedcontent/lockserver"
	"github.com/sharedcontent/sharedcontent/lockserver/httpserver"
)

func main() {
	f, err := parseFlags()
	if err == nil {
		err = run(f)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "sharedcontent-demo:", err)
		os.Exit(1)
	}
}

// demoFlags are the demo's command-line settings.
type demoFlags struct {
	nodes, layers, layerMiB int
	bandwidthMBps           int // 0: unlimited
}

func parseFlags() (demoFlags, error) {
	var f demoFlags
	flag.IntVar(&f.nodes, "nodes", 3, "number of nodes sharing the content directory")
	flag.IntVar(&f.layers, "layers", 6, "image layers")
	flag.IntVar(&f.layerMiB, "layer-mib", 16, "size of each layer in MiB")
	flag.IntVar(&f.bandwidthMBps, "bandwidth-mbps", 400, "registry uplink in MB/s, shared by all downloads (0: unlimited)")
	showVersion := flag.Bool(cli.VersionFlag, false, "print the version (and revision, Go version) and exit")
	flag.Parse()
	if *showVersion {
		cli.PrintVersion(os.Stdout, "sharedcontent-demo")
		os.Exit(0)
	}
	if f.nodes < 1 || f.layers < 1 || f.layerMiB < 1 {
		return f, errors.New("--nodes, --layers and --layer-mib must be positive")
	}
	return f, nil
}

// run runs the demo; an error if a promise does not hold.
func run(f demoFlags) error {
	log.SetLevel("error")
	ctx := contentv2test.Context(context.Background())

	dir, err := os.MkdirTemp("", "sharedcontent-demo-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)

	reg, img, err := startRegistry(ctx, f)
	if err != nil {
		return err
	}
	defer reg.Close()

	srv, err := httpserver.Open(httpserver.Config{Config: lockserver.DefaultConfig(), DataDir: dir + "/coordinator"})
	if err != nil {
		return err
	}
	defer srv.Shutdown(context.Background())

	root := dir + "/shared"
	ns, err := startNodes(ctx, srv.Coordinator, dir, root, f.nodes)
	defer closeNodes(ns)
	if err != nil {
		return err
	}

	fmt.Printf("pulling %s (%s) on %d nodes sharing %s\n\n", img.Ref, mib(img.Size()), len(ns), root)
	p := pullAll(ctx, ns, reg, img)
	for i, err := range p.errs {
		if err != nil {
			return fmt.Errorf("%s: pull failed: %w", ns[i].ID, err)
		}
	}
	if err := verify(ctx, ns, img); err != nil {
		return err
	}
	report(ns, reg, img, p)
	return collectOnOne(ctx, ns, root, img)
}

// collectOnOne shows that one node's garbage collection deletes nothing
// another node uses: every node records the image (as ctr images pull
// does; the blobs are already there), the first one removes it and runs
// containerd's GC, which drops every blob from its metadata and offers each
// to the store's Delete; the others still read every blob back, and every
// file stays. Stock containerd on a shared directory would delete them.
func collectOnOne(ctx context.Context, ns []*contentv2test.Node, root string, img registry.Image) error {
	if len(ns) < 2 {
		return nil
	}
	for _, n := range ns {
		if _, err := n.PullImage(ctx, img.Ref); err != nil {
			return fmt.Errorf("%s: recording the image: %w", n.ID, err)
		}
	}
	a, others := ns[0], ns[1:]
	if err := a.RemoveImage(ctx, img.Ref); err != nil {
		return err
	}
	if _, err := a.DB.GarbageCollect(ctx); err != nil {
		return fmt.Errorf("%s: garbage collection: %w", a.ID, err)
	}
	descs := img.Descriptors()
	for _, d := range descs {
		if _, err := a.CS.Info(ctx, d.Digest); !errdefs.IsNotFound(err) {
			return fmt.Errorf("%s still records blob %s after removing the image and collecting (%v)", a.ID, d.Digest, err)
		}
		if _, err := os.Stat(filepath.Join(root, "blobs", d.Digest.Algorithm().String(), d.Digest.Encoded())); err != nil {
			return fmt.Errorf("%s's garbage collection deleted blob %s, which the other nodes use: %w", a.ID, d.Digest, err)
		}
	}
	if err := verify(ctx, others, img); err != nil {
		return fmt.Errorf("after %s's garbage collection: %w", a.ID, err)
	}
	var ids []string
	for _, n := range others {
		ids = append(ids, n.ID)
	}
	fmt.Printf("\n%s removed the image and ran containerd's garbage collection: it dropped all %d blobs from its metadata;\n"+
		"all %d files stay in the shared directory, and %s read every blob back (digest verified)\n",
		a.ID, len(descs), len(descs), strings.Join(ids, ", "))
	return nil
}

// startRegistry starts the in-process registry with the demo's uplink and
// pushes a generated image to it.
func startRegistry(ctx context.Context, f demoFlags) (*registry.Registry, registry.Image, error) {
	var ropts []registry.Option
	if f.bandwidthMBps > 0 {
		ropts = append(ropts, registry.WithBandwidth(f.bandwidthMBps*1_000_000))
	}
	reg, err := registry.Start(ropts...)
	if err != nil {
		return nil, registry.Image{}, err
	}
	fmt.Printf("generating a %d × %d MiB image in the registry at %s ...\n", f.layers, f.layerMiB, reg.Host)
	img, err := reg.PushRandom(ctx, "demo/app:latest", f.layers, int64(f.layerMiB)<<20)
	if err != nil {
		reg.Close()
		return nil, registry.Image{}, err
	}
	reg.ResetCounters()
	return reg, img, nil
}

// startNodes starts n nodes on the shared root, each a client of the
// embedded coordinator l with its state under dir. On an error it returns
// the nodes started so far, for closeNodes.
func startNodes(ctx context.Context, l *lockserver.Coordinator, dir, root string, n int) ([]*contentv2test.Node, error) {
	var ns []*contentv2test.Node
	for i := range n {
		id := fmt.Sprintf("node-%d", i+1)
		state := fmt.Sprintf("%s/%s", dir, id)
		if err := os.MkdirAll(state, 0o700); err != nil {
			return ns, err
		}
		client, err := lockclient.NewEmbedded(l, lockclient.WithNodeID(id))
		if err != nil {
			return ns, err
		}
		node, err := contentv2test.NewNode(ctx, id, root, state, remote.New(client))
		if err != nil {
			return ns, err
		}
		ns = append(ns, node)
	}
	return ns, nil
}

// closeNodes closes the nodes, the last started first.
func closeNodes(ns []*contentv2test.Node) {
	for _, n := range slices.Backward(ns) {
		n.Close()
	}
}

// pulled is the outcome of pullAll.
type pulled struct {
	errs []error         // each node's pull error
	took []time.Duration // each node's time to have the image
	wall time.Duration   // until every node was done
}

// pullAll pulls img on every node at once, showing each node's progress
// and the registry's bytes sent until all are done.
func pullAll(ctx context.Context, ns []*contentv2test.Node, reg *registry.Registry, img registry.Image) pulled {
	received := make([]atomic.Int64, len(ns))
	p := pulled{errs: make([]error, len(ns)), took: make([]time.Duration, len(ns))}
	start := time.Now()
	var wg sync.WaitGroup
	for i, n := range ns {
		wg.Go(func() {
			_, p.errs[i] = contentv2test.Pull(ctx, n.CS, img.Ref, contentv2test.PullOptions{Received: &received[i]})
			p.took[i] = time.Since(start)
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
	p.wall = time.Since(start)
	fmt.Print("\n\n")
	return p
}

// verify reads every blob of img back through every node and checks its
// digest.
func verify(ctx context.Context, ns []*contentv2test.Node, img registry.Image) error {
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
	return nil
}

// report prints how often each blob was downloaded, the registry's egress
// against uncoordinated pulls, and the wall time.
func report(ns []*contentv2test.Node, reg *registry.Registry, img registry.Image, p pulled) {
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
	sort.Slice(p.took, func(i, j int) bool { return p.took[i] < p.took[j] })
	fmt.Printf("wall time: %s for all %d nodes to have the image (first node done at %s)\n",
		p.wall.Round(time.Millisecond), len(ns), p.took[0].Round(time.Millisecond))
}

func mib(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }
