package lockserver

import (
	"context"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"

	"github.com/sharedcontent/sharedcontent/lockserver/api"
)

func heapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// BenchmarkMemoryPerHeldLock reports the heap held by one granted lock on
// its own resource (resource, key, grant, lease id, shard map entry).
func BenchmarkMemoryPerHeldLock(b *testing.B) {
	c := newTestCoordinator(b)
	ctx := context.Background()
	ids := make([]string, b.N)
	for i := range ids {
		ids[i] = fmt.Sprintf("sha256:%064x", i)
	}
	before := heapInUse()
	b.ResetTimer()
	for i := range b.N {
		if _, err := c.Lock(ctx, api.LockRequest{Type: api.OperationPull, ResourceID: ids[i], NodeID: "node-1", RequestID: "r"}); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(heapInUse()-before)/float64(b.N), "B/held-lock")
	runtime.KeepAlive(ids)
}

// BenchmarkMemoryPerQueuedWaiter reports the heap held by one queued
// request, 100 waiters per key.
func BenchmarkMemoryPerQueuedWaiter(b *testing.B) {
	c := newTestCoordinator(b)
	ctx := context.Background()
	keys := max(1, b.N/100)
	for k := range keys {
		if _, err := c.Lock(ctx, api.LockRequest{Type: api.OperationPull, ResourceID: fmt.Sprintf("sha256:%064x", k), NodeID: "holder"}); err != nil {
			b.Fatal(err)
		}
	}
	reqs := make([]api.LockRequest, b.N)
	for i := range reqs {
		reqs[i] = api.LockRequest{Type: api.OperationPull, ResourceID: fmt.Sprintf("sha256:%064x", i%keys),
			NodeID: fmt.Sprintf("node-%d", i), RequestID: fmt.Sprintf("%032x", i)}
	}
	before := heapInUse()
	b.ResetTimer()
	for i := range b.N {
		if _, err := c.Lock(ctx, reqs[i]); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(heapInUse()-before)/float64(b.N), "B/waiter")
	runtime.KeepAlive(reqs)
}

// BenchmarkLockUnlockInProcess is the core's cost of one uncontended
// update lock+unlock cycle, without HTTP.
func BenchmarkLockUnlockInProcess(b *testing.B) {
	c := newTestCoordinator(b)
	ctx := context.Background()
	var next atomic.Int64
	b.RunParallel(func(pb *testing.PB) {
		id := fmt.Sprintf("sha256:%064x", next.Add(1))
		for pb.Next() {
			resp, err := c.Lock(ctx, api.LockRequest{Type: api.OperationUpdate, ResourceID: id, NodeID: "n"})
			if err != nil || !resp.Acquired {
				b.Fatal(err, resp)
			}
			if _, err := c.Unlock(ctx, api.UnlockRequest{Type: api.OperationUpdate, ResourceID: id, LeaseID: resp.LeaseID, Success: true}); err != nil {
				b.Fatal(err)
			}
		}
	})
}
