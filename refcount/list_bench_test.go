package refcount_test

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sharedcontent/sharedcontent/refcount"
	"github.com/sharedcontent/sharedcontent/refcount/storagetest"
)

// BenchmarkBoltList measures List on bbolt at 10k and 1M reference sets:
// one page of 1,000 at the start of the key space and deep in it (after
// 90 % of the keys), and a walk of all of them a page at a time, as GET
// /refs/list's clients do. A page costs O(page): the four page figures
// are alike (0.8–1.8 s were measured per page at 200k references
// when every page decoded every record). Besides wall time it reports the
// process's CPU time per op, which a loaded machine does not inflate.
// SHAREDCONTENT_BENCH_REFCOUNT_DB, when set, names a database of 1M
// reference sets made by storagetest.Fill (made there if missing).
//
//	go test -run '^$' -bench BoltList -benchtime 20x ./refcount/
func BenchmarkBoltList(b *testing.B) {
	for _, n := range []int{10_000, 1_000_000} {
		path := filepath.Join(b.TempDir(), "refcount.db")
		if env := os.Getenv("SHAREDCONTENT_BENCH_REFCOUNT_DB"); env != "" && n == 1_000_000 {
			path = env
		}
		_, statErr := os.Stat(path)
		s := openBolt(b, path)
		if os.IsNotExist(statErr) {
			require.NoError(b, storagetest.Fill(b.Context(), s, n, 2))
		}
		// The key 90 % of the way through the ordered key space.
		deep, err := s.List(b.Context(), "sha256:e6", 1)
		require.NoError(b, err)
		require.Len(b, deep, 1)
		for _, at := range []struct{ name, after string }{{"first", ""}, {"deep", deep[0].ResourceID}} {
			b.Run(fmt.Sprintf("refs=%d/page=%s", n, at.name), func(b *testing.B) {
				measure(b, func() {
					page, err := s.List(b.Context(), at.after, 1000)
					if err != nil || len(page) != 1000 {
						b.Fatalf("page of %d: %v", len(page), err)
					}
				})
			})
		}
		b.Run(fmt.Sprintf("refs=%d/walk", n), func(b *testing.B) {
			measure(b, func() {
				total, after := 0, ""
				for {
					page, err := s.List(b.Context(), after, 1000)
					require.NoError(b, err)
					total += len(page)
					if len(page) < 1000 {
						break
					}
					after = page[len(page)-1].ResourceID
				}
				require.Equal(b, n, total)
			})
		})
		require.NoError(b, s.Close())
	}
}

// measure runs op b.N times and reports the process's CPU time per op.
func measure(b *testing.B, op func()) {
	cpu := cpuTime()
	for b.Loop() {
		op()
	}
	b.ReportMetric(float64(cpuTime()-cpu)/float64(b.N), "cpu-ns/op")
}

// cpuTime is the process's user and system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

var _ refcount.Storage = (*refcount.BoltStorage)(nil)
