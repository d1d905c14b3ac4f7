package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"time"

	"github.com/containerd/containerd/v2/core/content"
	"github.com/containerd/containerd/v2/core/content/proxy"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sharedcontent/sharedcontent/contentv2"
	"github.com/sharedcontent/sharedcontent/contentv2/remote"
	"github.com/sharedcontent/sharedcontent/lockclient"
	"github.com/sharedcontent/sharedcontent/lockserver"
	"github.com/sharedcontent/sharedcontent/lockserver/httpserver"
	"github.com/sharedcontent/sharedcontent/plugin"
)

// readBuffers are the ReadAt sizes of the read test: 1 MiB, content.Copy's
// buffer. (32 KiB, io.Copy's default, measured the same through the proxy
// on this machine, within noise; add it here to see.)
var readBuffers = []int{1 << 20}

// overheadResult is one operation through the plugin and directly.
type overheadResult struct {
	Op string
	// Direct and Proxy are median throughputs in MB/s (10^6 bytes).
	Direct, Proxy float64
}

// Overhead is how much longer the proxied operation takes: Direct/Proxy - 1.
func (r overheadResult) Overhead() float64 { return r.Direct/r.Proxy - 1 }

// overheadBench writes and reads a blob of size bytes through containerd's
// content proxy client, over gRPC on a unix socket to plugin.Listen serving
// a contentv2 store, and through the same contentv2 store directly. The
// store's coordinator is an embedded coordinator (the daemon's default).
// With profileDir set, each proxied operation's CPU profile is written
// there.
func overheadBench(size int64, reps int, profileDir string, progress func(string)) ([]overheadResult, error) {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "bench-plugin-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	env, err := startOverheadEnv(ctx, dir)
	defer env.close()
	if err != nil {
		return nil, err
	}

	progress(fmt.Sprintf("plugin: generating a %d MiB blob", size>>20))
	data := make([]byte, size)
	rng := rand.NewChaCha8([32]byte{1})
	rng.Read(data)
	desc := ocispec.Descriptor{MediaType: "application/octet-stream", Digest: digest.FromBytes(data), Size: size}

	paths := []overheadPath{{"direct", env.store}, {"proxy", env.remote}}
	var out []overheadResult
	for _, o := range overheadOps(ctx, env.store, data, desc) {
		times, err := o.time(paths, reps, profileDir, progress)
		if err != nil {
			return nil, err
		}
		mbps := func(ds []time.Duration) float64 { return float64(size) / 1e6 / medianDuration(ds).Seconds() }
		out = append(out, overheadResult{Op: o.name, Direct: mbps(times["direct"]), Proxy: mbps(times["proxy"])})
	}
	return out, nil
}

// overheadEnv is one node as the daemon runs it, under one directory: an
// embedded coordinator, a contentv2 store, the proxy plugin's gRPC server
// on a unix socket, and containerd's proxy client of it.
type overheadEnv struct {
	store   contentv2.Store
	remote  content.Store // the proxy client
	closers []func()      // run last first by close
}

// startOverheadEnv starts the node under dir. On an error, env.close
// still stops what was started.
func startOverheadEnv(ctx context.Context, dir string) (env *overheadEnv, err error) {
	env = &overheadEnv{}
	srv, err := httpserver.Open(httpserver.Config{Config: lockserver.DefaultConfig(), DataDir: filepath.Join(dir, "coordinator")})
	if err != nil {
		return env, err
	}
	env.closers = append(env.closers, func() { srv.Shutdown(context.Background()) })
	coord, err := lockclient.NewEmbedded(srv.Coordinator, lockclient.WithNodeID("node-1"))
	if err != nil {
		return env, err
	}
	env.closers = append(env.closers, func() { coord.Close() })
	env.store, err = contentv2.NewStore(filepath.Join(dir, "shared"), "node-1", remote.New(coord), contentv2.WithStateDir(filepath.Join(dir, "state")))
	if err != nil {
		return env, err
	}
	env.closers = append(env.closers, func() { env.store.Close() })

	sock := filepath.Join(dir, "run", "content.sock")
	ps, err := plugin.Listen(sock, env.store)
	if err != nil {
		return env, err
	}
	go ps.Serve(ctx)
	env.closers = append(env.closers, func() { ps.Stop(context.Background()) })
	conn, err := grpc.NewClient("unix://"+sock,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(plugin.MaxMsgSize), grpc.MaxCallSendMsgSize(plugin.MaxMsgSize)))
	if err != nil {
		return env, err
	}
	env.closers = append(env.closers, func() { conn.Close() })
	env.remote = proxy.NewContentStore(conn)
	return env, nil
}

// close stops the node, the proxy client first and the coordinator last.
func (e *overheadEnv) close() {
	for _, c := range slices.Backward(e.closers) {
		c()
	}
}

// overheadPath is one way to the store: "direct" or "proxy".
type overheadPath struct {
	name string
	cs   content.Store
}

// overheadOp is one timed operation of the plugin test.
type overheadOp struct {
	name    string
	prepare func() error // untimed
	run     func(cs content.Store) error
}

// overheadOps are the operations on the blob data (desc): a write into an
// emptied store, and a read with each of readBuffers.
func overheadOps(ctx context.Context, store content.Store, data []byte, desc ocispec.Descriptor) []overheadOp {
	ops := []overheadOp{{
		name: "write",
		prepare: func() error {
			// Start from an empty store, through the store itself (a
			// delete lock, then the file).
			if err := store.Delete(ctx, desc.Digest); err != nil {
				return err
			}
			if _, err := store.Info(ctx, desc.Digest); err == nil {
				return fmt.Errorf("blob %s still present after delete", desc.Digest)
			}
			return nil
		},
		run: func(cs content.Store) error {
			return content.WriteBlob(ctx, cs, "bench-"+desc.Digest.Encoded(), bytes.NewReader(data), desc)
		},
	}}
	size := desc.Size
	for _, bs := range readBuffers {
		ops = append(ops, overheadOp{name: fmt.Sprintf("read (%s ReadAt)", sizeName(bs)), prepare: func() error { return nil }, run: func(cs content.Store) error {
			ra, err := cs.ReaderAt(ctx, desc)
			if err != nil {
				return err
			}
			defer ra.Close()
			n, err := io.CopyBuffer(io.Discard, io.NewSectionReader(ra, 0, size), make([]byte, bs))
			if err == nil && n != size {
				err = fmt.Errorf("read %d of %d bytes", n, size)
			}
			return err
		}})
	}
	return ops
}

// time runs o reps times on each path, alternating which path goes
// first, and returns the durations by path name. With profileDir set, the
// first proxied run is CPU-profiled there.
func (o overheadOp) time(paths []overheadPath, reps int, profileDir string, progress func(string)) (map[string][]time.Duration, error) {
	times := map[string][]time.Duration{}
	for r := range reps {
		// Alternate which path goes first.
		for j := range paths {
			p := paths[(j+r)%len(paths)]
			progress(fmt.Sprintf("plugin: %s, %s, run %d/%d", o.name, p.name, r+1, reps))
			if err := o.prepare(); err != nil {
				return nil, fmt.Errorf("plugin %s: %w", o.name, err)
			}
			stopProfile := func() {}
			if profileDir != "" && p.name == "proxy" && r == 0 {
				var err error
				stopProfile, err = startProfile(filepath.Join(profileDir, "plugin-"+slug(o.name)+".pprof"))
				if err != nil {
					return nil, err
				}
			}
			t0 := time.Now()
			err := o.run(p.cs)
			d := time.Since(t0)
			stopProfile()
			if err != nil {
				return nil, fmt.Errorf("plugin %s %s: %w", o.name, p.name, err)
			}
			times[p.name] = append(times[p.name], d)
		}
	}
	return times, nil
}

func sizeName(n int) string {
	if n >= 1<<20 {
		return fmt.Sprintf("%d MiB", n>>20)
	}
	return fmt.Sprintf("%d KiB", n>>10)
}

// startProfile starts a CPU profile into path and returns its stop.
func startProfile(path string) (func(), error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, err
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}, nil
}

func slug(s string) string {
	var b []byte
	for _, c := range []byte(s) {
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
			b = append(b, c)
		case c >= 'A' && c <= 'Z':
			b = append(b, c+'a'-'A')
		case len(b) > 0 && b[len(b)-1] != '-':
			b = append(b, '-')
		}
	}
	return string(bytes.TrimRight(b, "-"))
}
