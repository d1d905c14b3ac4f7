package registry

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	ggcr "github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"golang.org/x/time/rate"
)

// Registry is an OCI registry on 127.0.0.1 with download accounting.
type Registry struct {
	// Host is "127.0.0.1:port", for image references.
	Host string

	srv     *http.Server
	limiter *rate.Limiter // nil: unthrottled
	addr    string        // listen address; default 127.0.0.1:0

	mu    sync.Mutex
	gets  map[string]int // protected by mu; digest → GETs of the blob or manifest
	bytes atomic.Int64   // blob bytes sent

	user, password string // WithBasicAuth; "" none
}

// Option configures Start.
type Option func(*Registry)

// WithBandwidth throttles all blob downloads together to bytesPerSecond.
func WithBandwidth(bytesPerSecond int) Option {
	return func(r *Registry) {
		r.limiter = rate.NewLimiter(rate.Limit(bytesPerSecond), throttleChunk)
	}
}

// WithAddr listens on addr ("10.0.0.1:0", say) instead of 127.0.0.1:0,
// for clients in other network namespaces.
func WithAddr(addr string) Option {
	return func(r *Registry) { r.addr = addr }
}

// WithBasicAuth answers every request without these credentials 401,
// with a Basic challenge (PushRandom sends them).
func WithBasicAuth(user, password string) Option {
	return func(r *Registry) { r.user, r.password = user, password }
}

// SetBandwidth changes the throttle of a registry started WithBandwidth.
func (r *Registry) SetBandwidth(bytesPerSecond int) {
	if r.limiter == nil {
		panic("registry: SetBandwidth without WithBandwidth")
	}
	r.limiter.SetLimit(rate.Limit(bytesPerSecond))
}

// throttleChunk is the largest write the throttle lets through at once.
const throttleChunk = 64 << 10

// Start serves a new, empty registry until Close.
func Start(opts ...Option) (*Registry, error) {
	r := &Registry{addr: "127.0.0.1:0", gets: map[string]int{}}
	for _, o := range opts {
		o(r)
	}
	ln, err := net.Listen("tcp", r.addr)
	if err != nil {
		return nil, err
	}
	r.Host = ln.Addr().String()
	inner := ggcr.New(ggcr.Logger(log.New(io.Discard, "", 0)))
	r.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if u, p, _ := req.BasicAuth(); r.user != "" && (u != r.user || p != r.password) {
			w.Header().Set("WWW-Authenticate", `Basic realm="test registry"`)
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		if dgst, ok := blobGet(req); ok {
			r.mu.Lock()
			r.gets[dgst]++
			r.mu.Unlock()
			w = &countingWriter{ResponseWriter: w, r: r, ctx: req.Context()}
		}
		inner.ServeHTTP(w, req)
	})}
	go r.srv.Serve(ln)
	return r, nil
}

// blobGet reports whether req downloads a blob (or a manifest by digest),
// and which. Manifests fetched by tag are resolution, not downloads.
func blobGet(req *http.Request) (string, bool) {
	if req.Method != http.MethodGet || !strings.HasPrefix(req.URL.Path, "/v2/") {
		return "", false
	}
	for _, kind := range []string{"/blobs/", "/manifests/"} {
		if i := strings.LastIndex(req.URL.Path, kind); i >= 0 {
			ref := req.URL.Path[i+len(kind):]
			return ref, strings.Contains(ref, ":")
		}
	}
	return "", false
}

// countingWriter counts and throttles the bytes of a blob response.
type countingWriter struct {
	http.ResponseWriter
	r   *Registry
	ctx context.Context
}

func (w *countingWriter) Write(p []byte) (int, error) {
	n := 0
	for len(p) > 0 {
		chunk := p[:min(len(p), throttleChunk)]
		if w.r.limiter != nil {
			if err := w.r.limiter.WaitN(w.ctx, len(chunk)); err != nil {
				return n, err
			}
		}
		m, err := w.ResponseWriter.Write(chunk)
		n += m
		w.r.bytes.Add(int64(m))
		if err != nil {
			return n, err
		}
		p = p[m:]
	}
	return n, nil
}

// Close stops the registry.
func (r *Registry) Close() error { return r.srv.Close() }

// BlobGets returns the number of GETs of each digest (blobs and manifests by
// digest) so far.
func (r *Registry) BlobGets() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[string]int, len(r.gets))
	for k, v := range r.gets {
		out[k] = v
	}
	return out
}

// BlobBytes returns the blob bytes sent so far.
func (r *Registry) BlobBytes() int64 { return r.bytes.Load() }

// ResetCounters zeroes the GET and byte counters (after a push, say).
func (r *Registry) ResetCounters() {
	r.mu.Lock()
	defer r.mu.Unlock()
	clear(r.gets)
	r.bytes.Store(0)
}

// Image describes a pushed image.
type Image struct {
	// Ref is "host/repo:tag".
	Ref string
	// Manifest, Config and Layers are the image's blobs.
	Manifest v1.Descriptor
	Config   v1.Descriptor
	Layers   []v1.Descriptor
}

// Blobs returns every digest of the image, manifest first.
func (i Image) Blobs() []string {
	out := []string{i.Manifest.Digest.String(), i.Config.Digest.String()}
	for _, l := range i.Layers {
		out = append(out, l.Digest.String())
	}
	return out
}

// Descriptors returns the OCI descriptors of every blob, manifest first,
// then the config and the layers.
func (i Image) Descriptors() []ocispec.Descriptor {
	out := []ocispec.Descriptor{toOCI(i.Manifest), toOCI(i.Config)}
	for _, l := range i.Layers {
		out = append(out, toOCI(l))
	}
	return out
}

func toOCI(d v1.Descriptor) ocispec.Descriptor {
	return ocispec.Descriptor{MediaType: string(d.MediaType), Digest: digest.Digest(d.Digest.String()), Size: d.Size}
}

// Size is the sum of the sizes of all blobs.
func (i Image) Size() int64 {
	n := i.Manifest.Size + i.Config.Size
	for _, l := range i.Layers {
		n += l.Size
	}
	return n
}

// PushRandom generates an image of `layers` layers of layerSize random
// bytes each and pushes it as repo:tag. Random content does not compress,
// so each layer blob is about layerSize.
func (r *Registry) PushRandom(ctx context.Context, repo string, layers int, layerSize int64) (Image, error) {
	img, err := random.Image(layerSize, int64(layers))
	if err != nil {
		return Image{}, err
	}
	ref, err := name.ParseReference(r.Host+"/"+repo, name.Insecure)
	if err != nil {
		return Image{}, err
	}
	// An unthrottled side door for the push itself.
	auth := authn.Anonymous
	if r.user != "" {
		auth = &authn.Basic{Username: r.user, Password: r.password}
	}
	if err := remote.Write(ref, img, remote.WithContext(ctx), remote.WithAuth(auth)); err != nil {
		return Image{}, fmt.Errorf("push %s: %w", ref, err)
	}
	return describe(ref.String(), img)
}

func describe(ref string, img v1.Image) (Image, error) {
	out := Image{Ref: ref}
	m, err := img.Manifest()
	if err != nil {
		return Image{}, err
	}
	raw, err := img.RawManifest()
	if err != nil {
		return Image{}, err
	}
	dgst, err := img.Digest()
	if err != nil {
		return Image{}, err
	}
	out.Manifest = v1.Descriptor{MediaType: m.MediaType, Digest: dgst, Size: int64(len(raw))}
	out.Config = m.Config
	out.Layers = m.Layers
	if len(out.Layers) == 0 {
		return Image{}, errors.New("image has no layers")
	}
	return out, nil
}

// RawBlobs returns img's blobs as bytes, manifest first, then its config
// and its layers (compressed), in order: what an image archive holds.
func RawBlobs(img v1.Image) ([][]byte, error) {
	manifest, err := img.RawManifest()
	if err != nil {
		return nil, err
	}
	cfg, err := img.RawConfigFile()
	if err != nil {
		return nil, err
	}
	blobs := [][]byte{manifest, cfg}
	ls, err := img.Layers()
	if err != nil {
		return nil, err
	}
	for _, l := range ls {
		rc, err := l.Compressed()
		if err != nil {
			return nil, err
		}
		b, err := io.ReadAll(rc)
		rc.Close()
		if err != nil {
			return nil, err
		}
		blobs = append(blobs, b)
	}
	return blobs, nil
}
