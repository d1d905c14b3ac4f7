package election

import (
	"context"
	"fmt"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/sharedcontent/sharedcontent/internal/testutil/etcdtest"
	"github.com/sharedcontent/sharedcontent/lockserver"
	"github.com/sharedcontent/sharedcontent/lockserver/api"
	"github.com/sharedcontent/sharedcontent/refcount"
	"github.com/sharedcontent/sharedcontent/refcount/etcdstore"
)

// Shape of BenchmarkRolloutOnEtcd: bench/scale's rollout (one 10-blob
// image, each node pulling 3 blobs at once).
const (
	rolloutBlobs    = 10
	rolloutParallel = 3
)

// BenchmarkRolloutOnEtcd drives the coordinator's path of a rollout
// (docs/design.md §7.1, §10.2) in process, on the term's store as a
// replica builds it (the etcd store behind reportingStorage, a Manager, a
// Coordinator) against a real 3-member etcd: N nodes with open sessions
// each pull one 10-blob image, 3 blobs at a time: a pull lock (the first
// holds it, unlocks with success, the others skip), then a reference add.
// It reports, per node-blob, the wall time and the process CPU (the
// coordinator and its etcd client; etcd runs in processes of its own),
// and the guarded transactions, writes per transaction and bytes
// written; and what the nodes' first sessions, all at once before the
// rollout, took: their transactions and wall time.
//
//	SHAREDCONTENT_ETCD=$PWD/bin/etcd go test -run '^$' -bench RolloutOnEtcd -benchtime 1x ./lockserver/election/
func BenchmarkRolloutOnEtcd(b *testing.B) {
	for _, n := range []int{300, 1000} {
		b.Run(fmt.Sprintf("N=%d", n), func(b *testing.B) { benchRollout(b, n) })
	}
}

func benchRollout(b *testing.B, n int) {
	ctx := context.Background()
	c := etcdtest.Start(b, etcdtest.Options{})
	cli := c.Client(b)
	sess, err := concurrency.NewSession(cli, concurrency.WithTTL(30))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { sess.Close() })
	const prefix = "/rollout/"
	e := concurrency.NewElection(sess, prefix+"leader/")
	if err := e.Campaign(ctx, "replica-1"); err != nil {
		b.Fatal(err)
	}
	m := etcdstore.NewMetrics()
	reg := prometheus.NewRegistry()
	reg.MustRegister(m)
	store, err := etcdstore.OpenElection(ctx, cli, prefix, e, etcdstore.Options{Metrics: m})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { store.Close() })
	st := reportFenced(store, func(err error) { b.Errorf("fenced: %v", err) })
	// The nodes' sessions, opened once below, outlast the run: a renewal
	// of n sessions between rollouts would count in neither figure, and
	// one lapsed would refuse the node's references (docs/design.md §8.4).
	cfg := lockserver.DefaultConfig()
	cfg.SessionTTL = time.Hour
	l, err := lockserver.NewCoordinator(cfg, lockserver.Options{Refs: refcount.NewManager(st)})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { l.Close() })

	nodes := make([]string, n)
	for i := range nodes {
		nodes[i] = fmt.Sprintf("node-%05d", i)
	}
	sessions := measureTxns(b, reg, func() {
		var wg sync.WaitGroup
		for _, node := range nodes {
			wg.Go(func() {
				if _, err := l.Session(ctx, api.SessionRequest{NodeID: node}); err != nil {
					b.Error(err)
				}
			})
		}
		wg.Wait()
	})
	var total txnFigures
	b.ResetTimer()
	for i := range b.N {
		blobs := make([]string, rolloutBlobs)
		for j := range blobs {
			blobs[j] = fmt.Sprintf("sha256:%016x%048x", i, j)
		}
		f := measureTxns(b, reg, func() { rolloutOnce(b, l, nodes, blobs) })
		total.add(f)
		for _, blob := range blobs {
			rc, err := l.Refs(ctx, blob)
			if err != nil || rc.Count != n {
				b.Fatalf("%s: %d references, %v; want %d", blob, rc.Count, err, n)
			}
		}
	}
	per := float64(b.N * n * rolloutBlobs)
	b.ReportMetric(float64(total.wall.Microseconds())/per, "µs/node-blob")
	b.ReportMetric(float64(total.cpu.Microseconds())/per, "cpu-µs/node-blob")
	b.ReportMetric(total.txns/float64(b.N), "txns/rollout")
	b.ReportMetric(total.ops/max(1, total.txns), "writes/txn")
	b.ReportMetric(total.bytes/float64(b.N)/1024, "KiB/rollout")
	b.ReportMetric(sessions.txns, "session-txns")
	b.ReportMetric(sessions.wall.Seconds(), "sessions-s")
}

// rolloutOnce pulls blobs on every node, rolloutParallel at a time.
func rolloutOnce(b *testing.B, l *lockserver.Coordinator, nodes, blobs []string) {
	var wg sync.WaitGroup
	for _, node := range nodes {
		wg.Go(func() {
			sem := make(chan struct{}, rolloutParallel)
			var nwg sync.WaitGroup
			for _, blob := range blobs {
				sem <- struct{}{}
				nwg.Go(func() {
					defer func() { <-sem }()
					pullBlob(b, l, node, blob)
				})
			}
			nwg.Wait()
		})
	}
	wg.Wait()
}

func pullBlob(b *testing.B, l *lockserver.Coordinator, node, blob string) {
	ctx := context.Background()
	resp, err := l.Acquire(ctx, api.LockRequest{Type: api.OperationPull, ResourceID: blob, NodeID: node})
	if err != nil {
		b.Errorf("lock %s: %v", blob, err)
		return
	}
	if resp.Acquired {
		if _, err := l.Unlock(ctx, api.UnlockRequest{Type: api.OperationPull, ResourceID: blob, NodeID: node, LeaseID: resp.LeaseID, Success: true}); err != nil {
			b.Errorf("unlock %s: %v", blob, err)
			return
		}
	}
	if _, err := l.AddRef(ctx, blob, node); err != nil {
		b.Errorf("add %s: %v", blob, err)
	}
}

// txnFigures are what one measured stretch cost.
type txnFigures struct {
	wall, cpu        time.Duration
	txns, ops, bytes float64
}

func (f *txnFigures) add(g txnFigures) {
	f.wall += g.wall
	f.cpu += g.cpu
	f.txns += g.txns
	f.ops += g.ops
	f.bytes += g.bytes
}

// measureTxns runs f and returns its wall and process CPU time and the
// store's guarded transactions, writes and bytes meanwhile.
func measureTxns(b *testing.B, reg *prometheus.Registry, f func()) txnFigures {
	read := func() (txns, ops, bytes float64) {
		mfs, err := reg.Gather()
		if err != nil {
			b.Fatal(err)
		}
		for _, mf := range mfs {
			for _, m := range mf.GetMetric() {
				switch mf.GetName() {
				case "sharedcontent_etcd_txns_total":
					txns += m.GetCounter().GetValue()
				case "sharedcontent_etcd_txn_ops":
					ops += m.GetHistogram().GetSampleSum()
				case "sharedcontent_etcd_txn_bytes":
					bytes += m.GetHistogram().GetSampleSum()
				}
			}
		}
		return txns, ops, bytes
	}
	t0, o0, by0 := read()
	cpu0, start := processCPU(), time.Now()
	f()
	wall, cpu := time.Since(start), processCPU()-cpu0
	t1, o1, by1 := read()
	return txnFigures{wall: wall, cpu: cpu, txns: t1 - t0, ops: o1 - o0, bytes: by1 - by0}
}

// processCPU returns the user and system CPU time the process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
