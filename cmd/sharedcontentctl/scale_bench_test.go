package main

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sharedcontent/sharedcontent/lockclient"
	"github.com/sharedcontent/sharedcontent/lockserver/api"
	"github.com/sharedcontent/sharedcontent/lockserver/httpserver"
	"github.com/sharedcontent/sharedcontent/lockserver/lockservertest"
	"github.com/sharedcontent/sharedcontent/refcount"
	"github.com/sharedcontent/sharedcontent/refcount/storagetest"
)

// benchRefs is how many references BenchmarkDuAndReapDryRun1M's
// coordinator holds.
const benchRefs = 1_000_000

// BenchmarkDuAndReapDryRun1M runs `du` and `reap --dry-run` (their code,
// through a real coordinator on loopback) against 1M references, each
// walking GET /refs/list a page at a time (one answer for all
// timed out at 200k), and a bare walk (lockclient.Client.WalkRefs; its
// target, docs/design.md §10: ≤ 10 s). It reports wall and process CPU time per command, and the
// walk's against a storage-only walk of the same run (x-storage-cpu,
// x-storage-wall; docs/design.md §10.3). With
// SHAREDCONTENT_BENCH_DATA_DIR set, the coordinator's data directory is
// kept there (filled once, reused), so that the real binaries can be
// measured on it (docs/BENCHMARKS.md).
//
//	go test -run '^$' -bench DuAndReapDryRun1M -benchtime 1x ./cmd/sharedcontentctl/
func BenchmarkDuAndReapDryRun1M(b *testing.B) {
	dir := os.Getenv("SHAREDCONTENT_BENCH_DATA_DIR")
	if dir == "" {
		dir = b.TempDir()
	}
	if _, err := os.Stat(filepath.Join(dir, httpserver.DBFile)); os.IsNotExist(err) {
		require.NoError(b, os.MkdirAll(dir, 0o755))
		s, err := refcount.OpenBoltStorage(filepath.Join(dir, httpserver.DBFile))
		require.NoError(b, err)
		require.NoError(b, storagetest.Fill(b.Context(), s, benchRefs, 2))
		require.NoError(b, s.Close())
	}
	storeCPU, storeWall := storageWalk(b, filepath.Join(dir, httpserver.DBFile))
	coord := lockservertest.Start(b, lockservertest.WithDataDir(dir))
	c, err := lockclient.New(coord.URL(), lockclient.WithNodeID("sharedcontentctl"))
	require.NoError(b, err)
	b.Cleanup(func() { c.Close() })
	root := b.TempDir()
	require.NoError(b, os.MkdirAll(filepath.Join(root, "blobs", "sha256"), 0o755))
	p := printer{out: io.Discard, json: true}

	for _, cmd := range []struct {
		name string
		run  func(ctx context.Context) error
	}{
		{"du", func(ctx context.Context) error { return du(ctx, c, root, p) }},
		{"reap-dry-run", func(ctx context.Context) error { return reapDryRun(ctx, c, root, true, time.Hour, p) }},
		{"walk", func(ctx context.Context) error {
			n := 0
			err := c.WalkRefs(ctx, func(api.RefsEntry) error { n++; return nil })
			if err == nil && n != benchRefs {
				b.Fatalf("walked %d references, want %d", n, benchRefs)
			}
			return err
		}},
	} {
		b.Run(cmd.name, func(b *testing.B) {
			cpu := cpuTime()
			start := time.Now()
			for b.Loop() {
				require.NoError(b, cmd.run(b.Context()))
			}
			b.ReportMetric(float64(time.Since(start).Milliseconds())/float64(b.N), "wall-ms/op")
			b.ReportMetric(float64((cpuTime()-cpu).Milliseconds())/float64(b.N), "cpu-ms/op")
			if cmd.name == "walk" {
				// Against the storage-only walk of this run.
				b.ReportMetric(float64(time.Since(start))/float64(b.N)/float64(storeWall), "x-storage-wall")
				b.ReportMetric(float64(cpuTime()-cpu)/float64(b.N)/float64(storeCPU), "x-storage-cpu")
			}
		})
	}
}

// storageWalk walks every reference set of the database at path straight
// from storage, a page of api.MaxRefsPage at a time (what GET /refs/list
// reads for a walk, without HTTP), and returns its CPU and wall time: the
// walk sub-benchmark reports its own against them.
func storageWalk(b *testing.B, path string) (cpu, wall time.Duration) {
	s, err := refcount.OpenBoltStorage(path)
	require.NoError(b, err)
	defer s.Close()
	cpu0, start := cpuTime(), time.Now()
	n, after := 0, ""
	for {
		page, err := s.List(b.Context(), after, api.MaxRefsPage)
		require.NoError(b, err)
		n += len(page)
		if len(page) < api.MaxRefsPage {
			break
		}
		after = page[len(page)-1].ResourceID
	}
	cpu, wall = cpuTime()-cpu0, time.Since(start)
	require.Equal(b, benchRefs, n)
	b.Logf("storage-only walk of %d references: %v CPU, %v wall", n, cpu.Round(time.Millisecond), wall.Round(time.Millisecond))
	return cpu, wall
}

// cpuTime is the process's user and system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
