// Package contentv2test builds in-process sharedcontent nodes the way a real
// deployment stacks them: containerd's own metadata store on top of a
// contentv2 store on a shared directory, coordinated through a lock
// service. The multi-node tests, the demo and the benchmarks use it.
package contentv2test

import (
	"context"
	"errors"
	"io"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/containerd/containerd/v2/core/content"
	"github.com/containerd/containerd/v2/core/images"
	"github.com/containerd/containerd/v2/core/leases"
	"github.com/containerd/containerd/v2/core/metadata"
	"github.com/containerd/containerd/v2/core/remotes"
	"github.com/containerd/containerd/v2/core/remotes/docker"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/errdefs"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	bolt "go.etcd.io/bbolt"
	"golang.org/x/sync/semaphore"

	"github.com/sharedcontent/sharedcontent/contentv2"
)

// Namespace is the containerd namespace the nodes pull into.
const Namespace = "default"

// Context returns a context in Namespace.
func Context(ctx context.Context) context.Context {
	return namespaces.WithNamespace(ctx, Namespace)
}

// Node is one in-process containerd node.
type Node struct {
	ID    string
	Store contentv2.Store
	// DB is the node's own containerd metadata (bolt), whose garbage
	// collector calls the store's Delete.
	DB *metadata.DB
	// CS is the metadata store's content view: what containerd's pull and
	// GC use, and what a proxy plugin sits behind.
	CS content.Store

	bolt *bolt.DB
}

// NewNode opens a node whose containerd metadata lives in stateDir and
// whose content is the contentv2 store on the shared root.
//
// The node's journal lives in stateDir too (docs/design.md §8.2).
func NewNode(ctx context.Context, id, root, stateDir string, coord contentv2.Coordinator, opts ...contentv2.Option) (*Node, error) {
	opts = append([]contentv2.Option{contentv2.WithStateDir(filepath.Join(stateDir, "sharedcontent"))}, opts...)
	store, err := contentv2.NewStore(root, id, coord, opts...)
	if err != nil {
		return nil, err
	}
	db, err := bolt.Open(filepath.Join(stateDir, "meta.db"), 0o600, nil)
	if err != nil {
		store.Close()
		return nil, err
	}
	mdb := metadata.NewDB(db, store, nil)
	if err := mdb.Init(ctx); err != nil {
		store.Close()
		db.Close()
		return nil, err
	}
	return &Node{ID: id, Store: store, DB: mdb, CS: mdb.ContentStore(), bolt: db}, nil
}

// Close closes the node's metadata and store.
func (n *Node) Close() error {
	return errors.Join(n.Store.Close(), n.bolt.Close())
}

// PullImage pulls ref into the node as `ctr images pull` records an image
// (without unpacking): under a lease of the node's metadata, so that a
// garbage collection running meanwhile keeps what is already fetched, with
// containerd's GC labels on every parent blob, and with an image record
// named ref whose tree the node's garbage collector then keeps until
// RemoveImage.
func (n *Node) PullImage(ctx context.Context, ref string) (images.Image, error) {
	lm := metadata.NewLeaseManager(n.DB)
	l, err := lm.Create(ctx, leases.WithRandomID(), leases.WithExpiration(time.Hour))
	if err != nil {
		return images.Image{}, err
	}
	defer lm.Delete(context.WithoutCancel(ctx), l)
	ctx = leases.WithLease(ctx, l.ID)

	resolver := docker.NewResolver(docker.ResolverOptions{
		Hosts: docker.ConfigureDefaultRegistries(docker.WithPlainHTTP(docker.MatchAllHosts)),
	})
	name, desc, err := resolver.Resolve(ctx, ref)
	if err != nil {
		return images.Image{}, err
	}
	fetcher, err := resolver.Fetcher(ctx, name)
	if err != nil {
		return images.Image{}, err
	}
	h := images.Handlers(remotes.FetchHandler(n.CS, fetcher), images.SetChildrenLabels(n.CS, images.ChildrenHandler(n.CS)))
	if err := images.Dispatch(ctx, h, nil, desc); err != nil {
		return images.Image{}, err
	}
	img := images.Image{Name: ref, Target: desc}
	is := metadata.NewImageStore(n.DB)
	if _, err := is.Create(ctx, img); errdefs.IsAlreadyExists(err) {
		_, err = is.Update(ctx, img)
		return img, err
	} else if err != nil {
		return images.Image{}, err
	}
	return img, nil
}

// RemoveImage removes the image record name, as `ctr images rm` does; its
// blobs go at the node's next garbage collection.
func (n *Node) RemoveImage(ctx context.Context, name string) error {
	return metadata.NewImageStore(n.DB).Delete(ctx, name)
}

// PullOptions tune Pull.
type PullOptions struct {
	// Received, when not nil, counts the bytes read from the registry.
	Received *atomic.Int64
	// Concurrency bounds the blobs fetched at once (0: unbounded, as ctr).
	Concurrency int64
}

// Pull fetches ref's whole tree into cs with containerd's own resolver and
// fetch handlers, as `ctr images pull` does.
func Pull(ctx context.Context, cs content.Store, ref string, opts PullOptions) (ocispec.Descriptor, error) {
	resolver := docker.NewResolver(docker.ResolverOptions{
		Hosts: docker.ConfigureDefaultRegistries(docker.WithPlainHTTP(docker.MatchAllHosts)),
	})
	name, desc, err := resolver.Resolve(ctx, ref)
	if err != nil {
		return desc, err
	}
	fetcher, err := resolver.Fetcher(ctx, name)
	if err != nil {
		return desc, err
	}
	if opts.Received != nil {
		fetcher = countingFetcher{Fetcher: fetcher, n: opts.Received}
	}
	var limiter *semaphore.Weighted
	if opts.Concurrency > 0 {
		limiter = semaphore.NewWeighted(opts.Concurrency)
	}
	h := images.Handlers(remotes.FetchHandler(cs, fetcher), images.ChildrenHandler(cs))
	return desc, images.Dispatch(ctx, h, limiter, desc)
}

type countingFetcher struct {
	remotes.Fetcher
	n *atomic.Int64
}

func (f countingFetcher) Fetch(ctx context.Context, desc ocispec.Descriptor) (io.ReadCloser, error) {
	rc, err := f.Fetcher.Fetch(ctx, desc)
	if err != nil {
		return nil, err
	}
	return countingReader{ReadCloser: rc, n: f.n}, nil
}

type countingReader struct {
	io.ReadCloser
	n *atomic.Int64
}

func (r countingReader) Read(p []byte) (int, error) {
	n, err := r.ReadCloser.Read(p)
	r.n.Add(int64(n))
	return n, err
}
