package etcdstore_test

import (
	"crypto/sha256"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/sharedcontent/sharedcontent/internal/testutil/etcdtest"
	"github.com/sharedcontent/sharedcontent/refcount"
	"github.com/sharedcontent/sharedcontent/refcount/etcdstore"
)

// BenchmarkTakeOver measures what a new leader reads before it serves
// (docs/design.md §7.2): the reference hashes of every node, built from
// every reference in etcd (Manager.BuildHashes, which a Coordinator's
// start runs), on a real 3-member cluster holding
// SHAREDCONTENT_BENCH_REFS references (default 100,000: blobs of 100
// nodes each, written 64 to a Commit as a sync's groups are). It reports
// the seconds of one take-over: a fresh handle of a new leader, then the
// hashes; s/takeover walks, s/takeover-warm takes a standby's
// (etcdstore.Warm, kept from the watch since the fill), the two
// alternated on the same cluster.
//
//	go test -run '^$' -bench BenchmarkTakeOver -benchtime 3x ./refcount/etcdstore/
func BenchmarkTakeOver(b *testing.B) {
	refs := 100_000
	if v, err := strconv.Atoi(os.Getenv("SHAREDCONTENT_BENCH_REFS")); err == nil && v > 0 {
		refs = v
	}
	const nodes = 100
	c := etcdtest.Start(b, etcdtest.Options{})
	l := newLeaders(c.Client(b))
	const prefix = "/takeover/"
	s := l.campaign(b, prefix, etcdstore.Options{})
	ctx := b.Context()
	batch := new(refcount.Batch)
	for i := range refs {
		id := fmt.Sprintf("sha256:%x", sha256.Sum256(fmt.Appendf(nil, "blob-%d", i/nodes)))
		batch.AddRef(id, fmt.Sprintf("node-%04d.cluster.example", i%nodes))
		if batch.Len() == refcount.GroupRefs || i == refs-1 {
			if err := s.Commit(ctx, batch); err != nil {
				b.Fatal(err)
			}
			batch = new(refcount.Batch)
		}
	}
	w := etcdstore.StartWarm(ctx, c.Client(b), prefix, time.Minute)
	for {
		if _, err := w.NodeHashes(ctx); err == nil {
			break
		}
		time.Sleep(10 * time.Millisecond) // the standby's first walk
	}
	b.ResetTimer()
	var walk, warm time.Duration
	for b.Loop() {
		for _, how := range []string{refcount.HashesWalk, refcount.HashesWarm} {
			l.mu.Lock()
			w0 := l.wins[s]
			l.mu.Unlock()
			if err := w0.elect.Resign(ctx); err != nil { // the old leader steps down
				b.Fatal(err)
			}
			start := time.Now()
			s = l.campaign(b, prefix, etcdstore.Options{}) // a newer leader's handle
			m := refcount.NewManager(s)
			if how == refcount.HashesWarm {
				m.WarmHashes(w)
			}
			if err := m.BuildHashes(ctx); err != nil {
				b.Fatal(err)
			}
			took := time.Since(start)
			if got, err := m.HashesBuilt(); got != how {
				b.Fatalf("hashes built by %s, not %s: %v", got, how, err)
			}
			if how == refcount.HashesWarm {
				warm += took
			} else {
				walk += took
			}
		}
	}
	b.ReportMetric(walk.Seconds()/float64(b.N), "s/takeover")
	b.ReportMetric(warm.Seconds()/float64(b.N), "s/takeover-warm")
	b.ReportMetric(float64(refs), "refs")
}
