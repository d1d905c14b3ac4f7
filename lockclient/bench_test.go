package lockclient

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sharedcontent/sharedcontent/internal/testutil/renew"
	"github.com/sharedcontent/sharedcontent/lockserver/api"
	"github.com/sharedcontent/sharedcontent/lockserver/httpserver"
	"github.com/sharedcontent/sharedcontent/lockserver/lockservertest"
)

// BenchmarkNotify measures the notification latency over real HTTP on
// loopback: from the holder's Unlock(success) until every waiter's Lock
// has returned Skipped, with 1, 10 and 100 waiters (one Client each, as on
// separate nodes) on one key. Reported: p50-ms, p90-ms, p99-ms and max-ms
// of that latency; first-p50-ms, until the first waiter returned; and
// unlock-p50-ms and unlock-p99-ms, the Unlock call itself (a pull's success
// persists its reference before that call returns, so a slow fsync shows
// there). ns/op is the whole round (queueing the waiters included) and
// means little. A p99 needs a few hundred rounds: make bench runs 400.
//
// refs=bolt is the real server (bbolt, fsync per reference change);
// refs=memory keeps reference sets in memory, isolating the notification
// path.
//
// The holder unlocks as soon as every waiter is queued, so the process is
// still busy from queueing them. The idle=50ms cases first hold the lock
// for 50 ms, as a download would, so that the unlock meets an idle
// process: threads asleep, and here a virtual machine's CPUs halted. That
// costs every hand-off a wake-up.
func BenchmarkNotify(b *testing.B) {
	for _, refs := range []string{"bolt", "memory"} {
		for _, n := range []int{1, 10, 100} {
			b.Run(fmt.Sprintf("refs=%s/waiters=%d", refs, n), func(b *testing.B) { benchNotify(b, refs, n, 0) })
		}
		b.Run(fmt.Sprintf("refs=%s/waiters=100,idle=50ms", refs), func(b *testing.B) { benchNotify(b, refs, 100, 50*time.Millisecond) })
	}
}

func benchNotify(b *testing.B, refs string, n int, idle time.Duration) {
	var url string
	switch refs {
	case "bolt":
		url = lockservertest.Start(b).URL()
	case "memory":
		h := httpserver.NewHandler(lockservertest.NewCoordinator(b))
		url = lockservertest.ServeHandler(b, h, nil)
	}
	newClient := func(node string) *Client {
		c, err := New(url, WithNodeID(node))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { c.Close() })
		return c
	}
	holder := newClient("holder")
	// The holder records its pull, so it holds a live session
	// (docs/design.md §8.4), renewed between rounds as its daemon would.
	session := renew.New("holder", holder.Session)
	queued := make(chan struct{}, n)
	waiters := make([]*Client, n)
	for i := range waiters {
		waiters[i] = newClient(fmt.Sprintf("node-%d", i))
		waiters[i].http.onQueued = func(api.LockRequest) { queued <- struct{}{} }
	}

	ctx := context.Background()
	all := make([]time.Duration, 0, b.N)
	firsts := make([]time.Duration, 0, b.N)
	unlocks := make([]time.Duration, 0, b.N)
	ends := make([]time.Time, n)
	errs := make([]error, n)
	b.ResetTimer()
	for i := range b.N {
		b.StopTimer()
		if err := session.Renew(ctx); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		req := api.LockRequest{Type: api.OperationPull, ResourceID: fmt.Sprintf("sha256:bench-%s-%d-%d-%d", refs, n, b.N, i)}
		res, err := holder.Lock(ctx, req)
		if err != nil || !res.Acquired {
			b.Fatalf("holder: %+v %v", res, err)
		}
		var wg sync.WaitGroup
		for j, w := range waiters {
			wg.Go(func() {
				res, err := w.Lock(ctx, req)
				ends[j] = time.Now()
				if err == nil && !res.Skipped {
					err = fmt.Errorf("waiter %d: %+v", j, res)
				}
				errs[j] = err
			})
		}
		// Every waiter is queued with its event stream attached.
		for range n {
			<-queued
		}
		time.Sleep(idle) // the download: the workload, not a synchronisation
		start := time.Now()
		if err := holder.Unlock(ctx, res.Lease, true, nil); err != nil {
			b.Fatal(err)
		}
		unlocks = append(unlocks, time.Since(start))
		wg.Wait()
		for _, err := range errs {
			if err != nil {
				b.Fatal(err)
			}
		}
		first, last := ends[0], ends[0]
		for _, e := range ends {
			if e.After(last) {
				last = e
			}
			if e.Before(first) {
				first = e
			}
		}
		all = append(all, last.Sub(start))
		firsts = append(firsts, first.Sub(start))
	}
	b.StopTimer()
	b.ReportMetric(percentileMs(all, 0.50), "p50-ms")
	b.ReportMetric(percentileMs(all, 0.99), "p99-ms")
	b.ReportMetric(percentileMs(firsts, 0.50), "first-p50-ms")
	b.ReportMetric(percentileMs(unlocks, 0.50), "unlock-p50-ms")
	b.ReportMetric(percentileMs(unlocks, 0.99), "unlock-p99-ms")
	b.ReportMetric(percentileMs(all, 0.90), "p90-ms")
	b.ReportMetric(percentileMs(all, 1), "max-ms")
}

// percentileMs returns the q-quantile of ds (nearest rank) in
// milliseconds.
func percentileMs(ds []time.Duration, q float64) float64 {
	s := slices.Clone(ds)
	slices.Sort(s)
	i := max(int(math.Ceil(q*float64(len(s))))-1, 0)
	return float64(s[i]) / float64(time.Millisecond)
}

// BenchmarkLockUnlockHTTP measures lock+unlock cycles of an update lock
// through Client against a real coordinator over HTTP on loopback: 16
// clients (one per goroutine, as on separate nodes) on distinct keys. ns/op
// is the wall time per cycle over all clients; allocs/op counts both ends.
func BenchmarkLockUnlockHTTP(b *testing.B) {
	url := lockservertest.Start(b).URL()
	var next atomic.Int64
	b.SetParallelism(8) // × GOMAXPROCS (2 here): 16 clients
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := next.Add(1)
		c, err := New(url, WithNodeID(fmt.Sprintf("node-%d", i)))
		if err != nil {
			b.Error(err)
			return
		}
		defer c.Close()
		req := api.LockRequest{Type: api.OperationUpdate, ResourceID: fmt.Sprintf("sha256:bench-cycle-%d", i)}
		ctx := context.Background()
		for pb.Next() {
			res, err := c.Lock(ctx, req)
			if err == nil {
				err = c.Unlock(ctx, res.Lease, true, nil)
			}
			if err != nil {
				b.Error(err)
				return
			}
		}
	})
}
