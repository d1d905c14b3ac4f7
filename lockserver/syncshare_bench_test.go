package lockserver

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"

	"github.com/sharedcontent/sharedcontent/refcount"
)

// BenchmarkFirstSyncs: the first syncs of a fleet (SHAREDCONTENT_BENCH_NODES
// nodes, 50 by default, of 10,000 references each from a pool of 20,000,
// as bench/scale's restart setup gives them), all at once, through the
// Coordinator over bbolt: each its own transaction (alone, as before
// docs/design.md §10.9) and sharing transactions (shared, the defaults).
// It reports the wall time and the process's CPU per first sync.
//
//	go test -run '^$' -bench FirstSyncs -benchtime 1x -timeout 0 ./lockserver/
func BenchmarkFirstSyncs(b *testing.B) {
	nodes, refs := 50, 10_000
	if v, err := strconv.Atoi(os.Getenv("SHAREDCONTENT_BENCH_NODES")); err == nil {
		nodes = v
	}
	pool := make([]string, 2*refs)
	for k := range pool {
		pool[k] = digest.FromString(fmt.Sprintf("scale-ref-%d", k)).String()
	}
	for _, mode := range []string{"alone", "shared"} {
		b.Run(mode, func(b *testing.B) {
			for range b.N {
				b.StopTimer()
				s, err := refcount.OpenBoltStorage(filepath.Join(b.TempDir(), "refs.db"))
				if err != nil {
					b.Fatal(err)
				}
				cfg := DefaultConfig()
				cfg.MaxSyncs = 1 << 20
				if mode == "alone" {
					cfg.FirstSyncRefs = 1 // every write bigger: alone
				}
				c, err := NewCoordinator(cfg, Options{Refs: refcount.NewManager(s)})
				if err != nil {
					b.Fatal(err)
				}
				journals := make([][]string, nodes)
				for i := range journals {
					start := (i * 7919) % len(pool)
					for k := range refs {
						journals[i] = append(journals[i], pool[(start+k)%len(pool)])
					}
				}
				b.StartTimer()
				wall, cpu := time.Now(), processCPU()
				var wg sync.WaitGroup
				errs := make(chan error, nodes)
				for i := range nodes {
					wg.Add(1)
					go func() {
						defer wg.Done()
						node := fmt.Sprintf("scale-%05d", i)
						if _, err := renew(c, node); err != nil {
							errs <- err
							return
						}
						_, err := sendSync(context.Background(), c, node, "s", "g-"+node, journals[i])
						errs <- err
					}()
				}
				wg.Wait()
				close(errs)
				for err := range errs {
					if err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(time.Since(wall))/float64(nodes), "wall-ns/sync")
				b.ReportMetric(float64(processCPU()-cpu)/float64(nodes), "cpu-ns/sync")
				b.StopTimer()
				c.Close()
				s.Close()
			}
		})
	}
}
