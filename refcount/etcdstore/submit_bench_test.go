package etcdstore_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sharedcontent/sharedcontent/internal/testutil/etcdtest"
	"github.com/sharedcontent/sharedcontent/refcount"
	"github.com/sharedcontent/sharedcontent/refcount/etcdstore"
)

// BenchmarkGroupCommit: a rollout's adds (Manager.AddRefOrdered, 64 in
// flight, each node adding a reference to one of 10 blobs) against one
// real 3-member cluster, in the same run: with group commit off (every
// batch its own Txn, as Commit did), with Commit in the shape
// AddRefOrdered had before counted adds (a RefState, the write flushed at
// once, a RefState: batches pile up only while a Txn is in flight), with
// Submit in that shape ("read-submit": group commit on, the default 5 ms
// interval), and with AddRefOrdered itself ("submit": a counted add, no
// read of its own, docs/design.md §7.1). It reports each one's adds/s and
// Txns/s and the ratio of Submit's adds/s to off's.
func BenchmarkGroupCommit(b *testing.B) {
	const (
		workers = 64
		perWork = 20
		blobs   = 10
	)
	c := etcdtest.Start(b, etcdtest.Options{})
	l := newLeaders(c.Client(b))
	modes := []struct {
		name string
		opts etcdstore.Options
		add  func(s *etcdstore.Store, m *refcount.Manager, res, node string) error
	}{
		{"off", etcdstore.Options{FlushInterval: -1}, addOrdered},
		{"commit", etcdstore.Options{}, func(s *etcdstore.Store, _ *refcount.Manager, res, node string) error {
			// AddRefOrdered's shape: the state, the write, the count.
			ctx := context.Background()
			if _, _, err := s.RefState(ctx, res, node); err != nil {
				return err
			}
			if err := s.Commit(ctx, new(refcount.Batch).AddRef(res, node)); err != nil {
				return err
			}
			_, _, err := s.RefState(ctx, res, node)
			return err
		}},
		{"read-submit", etcdstore.Options{}, func(s *etcdstore.Store, _ *refcount.Manager, res, node string) error {
			ctx := context.Background()
			if _, _, err := s.RefState(ctx, res, node); err != nil {
				return err
			}
			if err := s.Submit(ctx, new(refcount.Batch).AddRef(res, node))(); err != nil {
				return err
			}
			_, _, err := s.RefState(ctx, res, node)
			return err
		}},
		{"submit", etcdstore.Options{}, addOrdered},
	}
	rate := map[string]float64{}
	round := 0
	for b.Loop() {
		round++
		for _, mode := range modes {
			opts := mode.opts
			opts.Metrics = etcdstore.NewMetrics()
			s := l.campaign(b, fmt.Sprintf("/bench/%s/%d/", mode.name, round), opts)
			m := refcount.NewManager(s)
			var (
				wg     sync.WaitGroup
				failed atomic.Int64
			)
			start := time.Now()
			for w := range workers {
				wg.Go(func() {
					for i := range perWork {
						node := fmt.Sprintf("n%d-%d", w, i)
						if err := mode.add(s, m, fmt.Sprintf("blob%d", (w+i)%blobs), node); err != nil {
							failed.Add(1)
						}
					}
				})
			}
			wg.Wait()
			d := time.Since(start).Seconds()
			if n := failed.Load(); n > 0 {
				b.Fatalf("%s: %d adds failed", mode.name, n)
			}
			txns := metric(b, opts.Metrics, "sharedcontent_etcd_txns_total")
			rate[mode.name] += workers * perWork / d
			b.ReportMetric(txns/d, mode.name+"-txns/s")
			b.ReportMetric(workers*perWork/txns, mode.name+"-adds/txn")
		}
	}
	for name, r := range rate {
		b.ReportMetric(r/float64(round), name+"-adds/s")
	}
	b.ReportMetric(rate["submit"]/rate["off"], "submit/off")
	b.ReportMetric(rate["commit"]/rate["off"], "commit/off")
	b.ReportMetric(rate["submit"]/rate["read-submit"], "submit/read-submit")
}

func addOrdered(_ *etcdstore.Store, m *refcount.Manager, res, node string) error {
	_, err := m.AddRefOrdered(context.Background(), res, node)()
	return err
}
