package refcount_test

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sharedcontent/sharedcontent/refcount"
)

// BenchmarkFirstSyncs measures the first syncs of a cluster through the
// Manager over bbolt, with the nodes' hashes built (as a coordinator
// runs): N nodes, one after the other, each adding its 1,000 references
// in one Commit with its member record (a first sync, from a journal
// generation the coordinator has not seen), from a pool of 2,000 blobs
// shared by all (as bench/scale's restart scenario: each blob is
// referenced by about half of the nodes). It reports the time and CPU of
// the last 10% of the syncs, when the sets are biggest: a sync's cost
// must not grow with N (measured: the restart setup of 1,000 × 1,000 took
// 175.6 s).
//
//	go test -run '^$' -bench FirstSyncs -benchtime 1x -timeout 0 ./refcount/
func BenchmarkFirstSyncs(b *testing.B) {
	const refs = 1000
	pool := make([]string, 2*refs)
	for i := range pool {
		pool[i] = fmt.Sprintf("sha256:pool-%08d", i)
	}
	for _, nodes := range []int{100, 1000} {
		b.Run(fmt.Sprintf("nodes=%d", nodes), func(b *testing.B) {
			for b.Loop() {
				s, err := refcount.OpenBoltStorage(filepath.Join(b.TempDir(), "refcount.db"))
				require.NoError(b, err)
				m := refcount.NewManager(s)
				require.NoError(b, m.BuildHashes(b.Context()))
				var wall, cpu time.Duration
				last := nodes - nodes/10
				for i := range nodes {
					node := fmt.Sprintf("node-%d", i)
					batch := new(refcount.Batch)
					start := (i * 7919) % len(pool)
					for k := range refs {
						batch.AddRef(pool[(start+k)%len(pool)], node)
					}
					batch.PutMember(refcount.Member{ID: node, Generation: "g"})
					w, c := time.Now(), cpuTime()
					require.NoError(b, m.Commit(b.Context(), batch))
					if i >= last {
						wall, cpu = wall+time.Since(w), cpu+cpuTime()-c
					}
				}
				n := float64(nodes - last)
				b.ReportMetric(float64(wall)/n, "sync-ns")
				b.ReportMetric(float64(cpu)/n, "sync-cpu-ns")
				require.NoError(b, s.Close())
			}
		})
	}
}
