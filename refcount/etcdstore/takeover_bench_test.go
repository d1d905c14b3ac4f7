package etcdstore_test

import (
	"crypto/sha256"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

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
// hashes; s/takeover walks, s/takeover-to-the-end walks reading to the
// end of refs/ each time (as before windows), s/takeover-warm takes a
// standby's (etcdstore.Warm, kept from the watch since the fill), the
// three alternated on the same cluster; keys-visited counts the keys etcd
// visited for a walk's reads (their Counts).
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
	const toTheEnd = "to-the-end" // a walk reading to the end of refs/ each time, as before windows
	took := map[string]time.Duration{}
	visits := map[string]*countingKV{refcount.HashesWalk: {}, toTheEnd: {}} // the keys etcd visits for the walks' reads
	for b.Loop() {
		for _, how := range []string{toTheEnd, refcount.HashesWalk, refcount.HashesWarm} {
			l.mu.Lock()
			w0 := l.wins[s]
			l.mu.Unlock()
			if err := w0.elect.Resign(ctx); err != nil { // the old leader steps down
				b.Fatal(err)
			}
			start := time.Now()
			s = l.campaign(b, prefix, etcdstore.Options{}) // a newer leader's handle
			if kv := visits[how]; kv != nil {
				s.WrapRefsKV(func(inner clientv3.KV) clientv3.KV { kv.KV = inner; return kv })
			}
			want := how
			if how == toTheEnd {
				s.ReadToTheEnd()
				want = refcount.HashesWalk
			}
			m := refcount.NewManager(s)
			if how == refcount.HashesWarm {
				m.WarmHashes(w)
			}
			if err := m.BuildHashes(ctx); err != nil {
				b.Fatal(err)
			}
			took[how] += time.Since(start)
			if got, err := m.HashesBuilt(); got != want {
				b.Fatalf("hashes built by %s, not %s: %v", got, want, err)
			}
		}
	}
	n := float64(b.N)
	b.ReportMetric(took[refcount.HashesWalk].Seconds()/n, "s/takeover")
	b.ReportMetric(took[toTheEnd].Seconds()/n, "s/takeover-to-the-end")
	b.ReportMetric(took[refcount.HashesWarm].Seconds()/n, "s/takeover-warm")
	b.ReportMetric(float64(visits[refcount.HashesWalk].visits)/n, "keys-visited/takeover")
	b.ReportMetric(float64(visits[toTheEnd].visits)/n, "keys-visited/takeover-to-the-end")
	b.ReportMetric(float64(refs), "refs")
}
