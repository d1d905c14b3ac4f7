package prefetch

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/containerd/containerd/v2/core/content"
	"github.com/containerd/containerd/v2/core/images"
	"github.com/containerd/containerd/v2/core/remotes"
	"github.com/containerd/errdefs"
	"github.com/containerd/platforms"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"golang.org/x/sync/semaphore"

	"github.com/sharedcontent/sharedcontent/internal/registry"
)

// DefaultConcurrency is how many blobs are downloaded at once, as
// containerd's max_concurrent_downloads.
const DefaultConcurrency = 3

// Options say what to fetch and whom to tell.
type Options struct {
	// Platforms are the platforms whose manifests are fetched
	// ("linux/amd64"); empty: every platform of an index.
	Platforms []string
	// Concurrency is the blobs downloaded at once (0: DefaultConcurrency).
	Concurrency int64
	// Progress, if set, is called (from several goroutines, never at
	// once) as blobs start, receive bytes and end.
	Progress func(Event)
}

// EventKind is what an Event reports.
type EventKind int

const (
	// Started: a blob's fetch began (it may still find the blob present).
	Started EventKind = iota
	// Wrote: Bytes more of the blob were written.
	Wrote
	// Done: the blob is in the store; Blob says how it got there.
	Done
)

// Event is one step of the fetch.
type Event struct {
	Kind  EventKind
	Desc  ocispec.Descriptor
	Bytes int64 // Wrote: the bytes just written
	Blob  Blob  // Done
}

// Blob is a blob of the image and how it got into the store.
type Blob struct {
	Digest    string `json:"digest"`
	MediaType string `json:"media_type"`
	Size      int64  `json:"size"`
	// Fetched: downloaded by this fetch; otherwise it was present (or
	// another holder of the pull lock downloaded it meanwhile).
	Fetched bool `json:"fetched"`
	// Took is the blob's time from its start to its end.
	Took time.Duration `json:"took_ns"`
}

// Result is what Fetch did.
type Result struct {
	// Ref is the full reference (registry.Normalize); Target the
	// descriptor it resolved to.
	Ref    string             `json:"ref"`
	Target ocispec.Descriptor `json:"target"`
	// Blobs are the image's blobs in the order they ended, each once.
	Blobs []Blob `json:"blobs"`
	// FetchedBytes are the bytes written into the store.
	FetchedBytes int64         `json:"fetched_bytes"`
	Took         time.Duration `json:"took_ns"`
}

// Digests returns the digests of every blob of the image, sorted.
func (r Result) Digests() []string {
	out := make([]string, 0, len(r.Blobs))
	for _, b := range r.Blobs {
		out = append(out, b.Digest)
	}
	slices.Sort(out)
	return out
}

// Counts returns the blobs fetched and present, and all their bytes.
func (r Result) Counts() (fetched, present int, size int64) {
	for _, b := range r.Blobs {
		if b.Fetched {
			fetched++
		} else {
			present++
		}
		size += b.Size
	}
	return fetched, present, size
}

// Fetch resolves ref with resolver and downloads its blobs into cs:
// blobs present are referenced, not downloaded (cs's Writer answers
// AlreadyExists). A blob whose content does not match its digest fails
// the fetch (the store's commit checks it).
func Fetch(ctx context.Context, cs content.Store, resolver remotes.Resolver, ref string, opts Options) (Result, error) {
	start := time.Now()
	matcher, err := platformMatcher(opts.Platforms)
	if err != nil {
		return Result{}, err
	}
	full, target, err := registry.Resolve(ctx, resolver, ref)
	if err != nil {
		return Result{}, err
	}
	fetcher, err := resolver.Fetcher(ctx, full)
	if err != nil {
		return Result{}, fmt.Errorf("fetch %s: %w", full, err)
	}
	if opts.Concurrency <= 0 {
		opts.Concurrency = DefaultConcurrency
	}
	f := &fetch{cs: cs, fetcher: fetcher, progress: opts.Progress, seen: map[string]bool{}}
	h := images.Handlers(images.HandlerFunc(f.blob), images.FilterPlatforms(images.ChildrenHandler(cs), matcher))
	if err := images.Dispatch(ctx, h, semaphore.NewWeighted(opts.Concurrency), target); err != nil {
		return Result{}, fmt.Errorf("fetch %s: %w", full, err)
	}
	res := Result{Ref: full, Target: target, Blobs: f.blobs, Took: time.Since(start)}
	for _, b := range f.blobs {
		if b.Fetched {
			res.FetchedBytes += b.Size
		}
	}
	return res, nil
}

// platformMatcher matches the platforms named, or every one.
func platformMatcher(names []string) (platforms.MatchComparer, error) {
	if len(names) == 0 {
		return platforms.All, nil
	}
	var ps []ocispec.Platform
	for _, n := range names {
		p, err := platforms.Parse(n)
		if err != nil {
			return nil, fmt.Errorf("--platform %q: %w: %w", n, errdefs.ErrInvalidArgument, err)
		}
		ps = append(ps, p)
	}
	return platforms.Any(ps...), nil
}

// fetch is one Fetch's state.
type fetch struct {
	cs       content.Store
	fetcher  remotes.Fetcher
	progress func(Event)

	mu    sync.Mutex
	blobs []Blob          // protected by mu
	seen  map[string]bool // protected by mu; digests in blobs
}

// tell reports e to the progress callback, one at a time.
func (f *fetch) tell(e Event) {
	if f.progress == nil {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.progress(e)
}

// blob fetches one blob into the store (containerd's remotes.Fetch, as
// its FetchHandler does), recording whether it was downloaded.
func (f *fetch) blob(ctx context.Context, desc ocispec.Descriptor) ([]ocispec.Descriptor, error) {
	if desc.MediaType == images.MediaTypeDockerSchema1Manifest {
		return nil, fmt.Errorf("%s: %s is not supported: %w", desc.Digest, desc.MediaType, errdefs.ErrNotImplemented)
	}
	start := time.Now()
	f.tell(Event{Kind: Started, Desc: desc})
	w := &writes{Ingester: f.cs, wrote: func(n int64) { f.tell(Event{Kind: Wrote, Desc: desc, Bytes: n}) }}
	err := remotes.Fetch(ctx, w, f.fetcher, desc)
	if err != nil && !errdefs.IsAlreadyExists(err) {
		return nil, err
	}
	b := Blob{Digest: desc.Digest.String(), MediaType: desc.MediaType, Size: desc.Size, Fetched: w.opened && err == nil, Took: time.Since(start)}
	f.mu.Lock()
	if !f.seen[b.Digest] { // a blob of two platforms' manifests once
		f.seen[b.Digest] = true
		f.blobs = append(f.blobs, b)
	}
	f.mu.Unlock()
	f.tell(Event{Kind: Done, Desc: desc, Blob: b})
	return nil, nil
}

// writes is an Ingester that reports the bytes written through it and
// whether a writer was opened (none: the blob was present).
type writes struct {
	content.Ingester
	wrote  func(int64)
	opened bool
}

func (i *writes) Writer(ctx context.Context, opts ...content.WriterOpt) (content.Writer, error) {
	w, err := i.Ingester.Writer(ctx, opts...)
	if err != nil {
		return nil, err
	}
	i.opened = true
	return &countingWriter{Writer: w, wrote: i.wrote}, nil
}

// countingWriter reports each write's bytes.
type countingWriter struct {
	content.Writer
	wrote func(int64)
}

func (w *countingWriter) Write(p []byte) (int, error) {
	n, err := w.Writer.Write(p)
	if n > 0 {
		w.wrote(int64(n))
	}
	return n, err
}
