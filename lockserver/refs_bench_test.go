package lockserver

import (
	"context"
	"fmt"
	"path/filepath"
	"runtime"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sharedcontent/sharedcontent/lockserver/api"
	"github.com/sharedcontent/sharedcontent/refcount"
)

// refsBenchBlobs is the number of blobs every node adds a reference to:
// one 10-blob image rolled out to N nodes.
const refsBenchBlobs = 10

// refsBenchWorkers is the number of adds in flight at once (nodes adding
// concurrently, as in a rollout).
const refsBenchWorkers = 64

// BenchmarkRefsAddRollout is the reference hot path of a rollout
// (docs/design.md §10.2): N nodes each add a
// reference to each of 10 blobs through Coordinator.AddRef over bbolt in
// a temporary directory, 64 adds in flight. One op is one whole rollout;
// it reports the wall time and the process CPU time per node-blob, which
// stay flat in N when nothing on the path grows with the reference set.
//
//	go test -run '^$' -bench BenchmarkRefsAddRollout -benchtime 1x ./lockserver/
func BenchmarkRefsAddRollout(b *testing.B) {
	for _, n := range []int{100, 1000, 2600, 5000} {
		b.Run(fmt.Sprintf("N=%d", n), func(b *testing.B) { benchRefsAddRollout(b, n) })
	}
}

func benchRefsAddRollout(b *testing.B, n int) {
	ctx := context.Background()
	nodes := make([]string, n)
	for i := range nodes {
		nodes[i] = fmt.Sprintf("node-%05d", i)
	}
	blobs := make([]string, refsBenchBlobs)
	for i := range blobs {
		blobs[i] = fmt.Sprintf("sha256:%064x", i)
	}
	var (
		wall, cpu time.Duration
		allocs    uint64
		ms        runtime.MemStats
	)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		s, err := refcount.OpenBoltStorage(filepath.Join(b.TempDir(), "refs.db"))
		if err != nil {
			b.Fatal(err)
		}
		cfg := DefaultConfig()
		cfg.SessionTTL = time.Hour // outlasts the run
		c, err := NewCoordinator(cfg, Options{Refs: refcount.NewManager(s)})
		if err != nil {
			b.Fatal(err)
		}
		for _, node := range nodes { // references only with a session (refrule.go)
			if _, err := c.Session(ctx, api.SessionRequest{NodeID: node}); err != nil {
				b.Fatal(err)
			}
		}
		work := make(chan [2]string, refsBenchWorkers)
		var wg sync.WaitGroup
		errs := make(chan error, refsBenchWorkers)
		runtime.ReadMemStats(&ms)
		mallocs0 := ms.Mallocs
		cpu0, start := processCPU(), time.Now()
		b.StartTimer()
		for range refsBenchWorkers {
			wg.Go(func() {
				for w := range work {
					if _, err := c.AddRef(ctx, w[0], w[1]); err != nil {
						errs <- err
						return
					}
				}
			})
		}
		for _, node := range nodes {
			for _, blob := range blobs {
				work <- [2]string{blob, node}
			}
		}
		close(work)
		wg.Wait()
		b.StopTimer()
		wall += time.Since(start)
		cpu += processCPU() - cpu0
		runtime.ReadMemStats(&ms)
		allocs += ms.Mallocs - mallocs0
		close(errs)
		for err := range errs {
			b.Fatal(err)
		}
		for _, blob := range blobs {
			rc, err := c.refs.Refs(ctx, blob)
			if err != nil || rc.Len() != n {
				b.Fatalf("%s: %d references, %v; want %d", blob, rc.Len(), err, n)
			}
		}
		c.Close()
		s.Close()
		b.StartTimer()
	}
	per := float64(b.N * n * refsBenchBlobs)
	b.ReportMetric(float64(wall.Nanoseconds())/per, "ns/node-blob")
	b.ReportMetric(float64(cpu.Nanoseconds())/per, "cpu-ns/node-blob")
	b.ReportMetric(float64(allocs)/per, "allocs/node-blob")
}

// processCPU returns the user and system CPU time the process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
