package refcount_test

import (
	"encoding/binary"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"

	"github.com/sharedcontent/sharedcontent/refcount"
	"github.com/sharedcontent/sharedcontent/refcount/storagetest"
)

// BenchmarkBoltReplaceNode measures, on bbolt, a node of 1,000
// references syncing for the first time (ReplaceNode from none), syncing
// in full again with half of them changed, and being forgotten
// (ReplaceNode(node, nil)), beside 10k and 1M other references (as many
// reference sets, each of another node): with the per-node index each
// costs O(the node's references), the same at 1M others as at 10k
// (docs/design.md §10.3: before the index a forget walked every set, 5.6 s
// at 1M). It also measures building the index when a file of refs_format
// 2 is opened (build-index, O(all references); at most 3 runs). Besides
// wall time it reports the process's CPU time per op.
//
//	go test -run '^$' -bench BoltReplaceNode -benchtime 20x -timeout 0 ./refcount/
func BenchmarkBoltReplaceNode(b *testing.B) {
	const own = 1000
	ids := func(from int) map[string]struct{} {
		refs := make(map[string]struct{}, own)
		for i := range own {
			refs[fmt.Sprintf("sha256:own-%08d", from+i)] = struct{}{}
		}
		return refs
	}
	first, changed := ids(0), ids(own/2)
	for _, others := range []int{10_000, 1_000_000} {
		path := filepath.Join(b.TempDir(), "refcount.db")
		s := openBolt(b, path)
		require.NoError(b, storagetest.Fill(b.Context(), s, others, 1))
		commit := func(bt *refcount.Batch) {
			if err := s.Commit(b.Context(), bt); err != nil {
				b.Fatal(err)
			}
		}
		// Each op: a first sync and a forget, timed apart.
		b.Run(fmt.Sprintf("others=%d/first-sync+forget", others), func(b *testing.B) {
			var syncWall, forgetWall, syncCPU, forgetCPU time.Duration
			for b.Loop() {
				w, c := time.Now(), cpuTime()
				commit(new(refcount.Batch).ReplaceNode("target", first))
				syncWall, syncCPU = syncWall+time.Since(w), syncCPU+cpuTime()-c
				w, c = time.Now(), cpuTime()
				commit(new(refcount.Batch).ReplaceNode("target", nil).DeleteMember("target"))
				forgetWall, forgetCPU = forgetWall+time.Since(w), forgetCPU+cpuTime()-c
			}
			n := float64(b.N)
			b.ReportMetric(float64(syncWall)/n, "sync-ns/op")
			b.ReportMetric(float64(syncCPU)/n, "sync-cpu-ns/op")
			b.ReportMetric(float64(forgetWall)/n, "forget-ns/op")
			b.ReportMetric(float64(forgetCPU)/n, "forget-cpu-ns/op")
		})
		b.Run(fmt.Sprintf("others=%d/full-sync-half-changed", others), func(b *testing.B) {
			commit(new(refcount.Batch).ReplaceNode("target", first))
			i := 0
			measure(b, func() {
				i++
				refs := first
				if i%2 == 1 {
					refs = changed
				}
				commit(new(refcount.Batch).ReplaceNode("target", refs))
			})
			commit(new(refcount.Batch).ReplaceNode("target", nil))
		})
		b.Run(fmt.Sprintf("others=%d/build-index", others), func(b *testing.B) {
			require.NoError(b, s.Close())
			// At most 3 builds, whatever -benchtime says: each is a walk
			// of every reference.
			var wall, cpu time.Duration
			runs := min(b.N, 3)
			for range runs {
				db, err := bolt.Open(path, 0o600, nil)
				require.NoError(b, err)
				require.NoError(b, db.Update(func(tx *bolt.Tx) error {
					return tx.Bucket([]byte("meta")).Put([]byte("refs_format"), binary.BigEndian.AppendUint64(nil, 2))
				}))
				require.NoError(b, db.Close())
				w, c := time.Now(), cpuTime()
				s, err := refcount.OpenBoltStorage(path)
				require.NoError(b, err)
				wall, cpu = wall+time.Since(w), cpu+cpuTime()-c
				require.NoError(b, s.Close())
			}
			b.ReportMetric(float64(wall)/float64(runs), "open-ns/op")
			b.ReportMetric(float64(cpu)/float64(runs), "open-cpu-ns/op")
		})
	}
}
