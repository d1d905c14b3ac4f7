package refcount_test

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"
	"github.com/stretchr/testify/require"

	"github.com/sharedcontent/sharedcontent/refcount"
)

// BenchmarkBoltFirstSync10k measures, on bbolt through the Manager with
// the nodes' hashes built (as a coordinator runs), one node's first sync
// of 10,000 references (one AddRef a group and its member record, as the
// coordinator writes a sync from a journal generation it has not seen)
// into a store that already holds the first syncs of 999 other nodes of
// 10,000 references each: bench/scale's restart setup at 1,000 × 10,000
// (a pool of 20,000 blobs, each referenced by about half of the nodes;
// docs/design.md §10). Each op is a first sync, timed, and the node's
// forget, not timed. It reports the sync's wall and CPU time, those of
// building the nodes' hashes once (BuildHashes, which a coordinator runs
// before it answers), and, when
// it fills the store, the CPU per node of the others' syncs, written 25
// to a transaction (shared-sync-cpu-ns): bbolt copies on write every page
// a transaction touches, and a first sync touches one or two pages of
// each of 10,000 reference sets (nested buckets) and their parents,
// whatever the order of its writes, so a transaction's cost is mostly
// the pages it rewrites, shared by the syncs it holds.
// SHAREDCONTENT_BENCH_NODES sets the nodes already stored (999);
// SHAREDCONTENT_BENCH_CPUPROFILE names a CPU profile of the first op;
// SHAREDCONTENT_BENCH_DB (a path prefix) keeps a copy of the filled file
// for later runs of as many nodes (filling 999 takes minutes).
//
//	go test -run '^$' -bench BoltFirstSync10k -benchtime 5x -timeout 0 ./refcount/
func BenchmarkBoltFirstSync10k(b *testing.B) {
	const refs = 10_000
	others := 999
	if v, err := strconv.Atoi(os.Getenv("SHAREDCONTENT_BENCH_NODES")); err == nil {
		others = v
	}
	pool := make([]string, 2*refs)
	for k := range pool {
		pool[k] = digest.FromString(fmt.Sprintf("scale-ref-%d", k)).String()
	}
	// node i's journal, as bench/scale's restart scenario gives it.
	firstSync := func(i int) *refcount.Batch {
		node := fmt.Sprintf("scale-%05d", i)
		batch := new(refcount.Batch)
		start := (i * 7919) % len(pool)
		for k := range refs {
			batch.AddRef(pool[(start+k)%len(pool)], node).Break()
		}
		return batch.PutMember(refcount.Member{ID: node, Generation: "g"})
	}
	path := filepath.Join(b.TempDir(), "refcount.db")
	// SHAREDCONTENT_BENCH_DB names a copy of the filled file, made once
	// and reused by later runs of as many nodes.
	toFill := others
	saved := os.Getenv("SHAREDCONTENT_BENCH_DB")
	if saved != "" {
		saved = fmt.Sprintf("%s.%d", saved, others)
		if data, err := os.ReadFile(saved); err == nil {
			require.NoError(b, os.WriteFile(path, data, 0o600))
			toFill = 0
		}
	}
	s := openBolt(b, path)
	// The others' syncs, fillNodes to a Commit straight to the storage
	// (bbolt then touches each set once per transaction, not once per
	// node), and the hashes built once, as a coordinator's start does.
	const fillNodes = 25
	fill := time.Now()
	fillCPU := cpuTime()
	for from := 0; from < toFill; from += fillNodes {
		batch := new(refcount.Batch)
		for i := from; i < min(toFill, from+fillNodes); i++ {
			for _, op := range firstSync(i).Writes() {
				if op.Kind == refcount.WriteAddRef {
					batch.AddRef(op.Key, op.Node)
				} else {
					batch.PutMember(op.Member)
				}
			}
		}
		require.NoError(b, s.Commit(b.Context(), batch))
	}
	if saved != "" && toFill > 0 {
		require.NoError(b, s.Close())
		data, err := os.ReadFile(path)
		require.NoError(b, err)
		require.NoError(b, os.WriteFile(saved, data, 0o600))
		s = openBolt(b, path)
	}
	var sharedCPU time.Duration
	if toFill > 0 {
		// What a first sync costs in a transaction shared by fillNodes.
		sharedCPU = (cpuTime() - fillCPU) / time.Duration(toFill)
	}
	b.Logf("filled %d nodes × %d references: %s, %s CPU", toFill, refs, time.Since(fill), cpuTime()-fillCPU)
	// The hashes, built as a restarted coordinator does before it answers.
	m := refcount.NewManager(s)
	w, c := time.Now(), cpuTime()
	require.NoError(b, m.BuildHashes(b.Context()))
	buildWall, buildCPU := time.Since(w), cpuTime()-c
	target := others
	var wall, cpu time.Duration
	for b.Loop() {
		profile(b, wall == 0)
		w, c := time.Now(), cpuTime()
		require.NoError(b, m.Commit(b.Context(), firstSync(target)))
		wall, cpu = wall+time.Since(w), cpu+cpuTime()-c
		profile(b, false)
		node := fmt.Sprintf("scale-%05d", target)
		require.NoError(b, m.Commit(b.Context(), new(refcount.Batch).ReplaceNode(node, nil).DeleteMember(node)))
	}
	n := float64(b.N)
	b.ReportMetric(float64(wall)/n, "sync-ns/op")
	b.ReportMetric(float64(cpu)/n, "sync-cpu-ns/op")
	// After the loop: b.Loop drops the metrics reported before it.
	b.ReportMetric(float64(buildWall), "build-hashes-ns")
	b.ReportMetric(float64(buildCPU), "build-hashes-cpu-ns")
	if sharedCPU > 0 {
		b.ReportMetric(float64(sharedCPU), "shared-sync-cpu-ns")
	}
}

// profile starts (on) or stops a CPU profile of the first op into the
// file SHAREDCONTENT_BENCH_CPUPROFILE names, if it does.
func profile(b *testing.B, on bool) {
	name := os.Getenv("SHAREDCONTENT_BENCH_CPUPROFILE")
	switch {
	case name == "":
	case on:
		f, err := os.Create(name)
		require.NoError(b, err)
		b.Cleanup(func() { f.Close() })
		require.NoError(b, pprof.StartCPUProfile(f))
	default:
		pprof.StopCPUProfile()
	}
}
