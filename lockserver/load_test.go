package lockserver

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sharedcontent/sharedcontent/lockserver/api"
)

// TestMutualExclusionUnderLoad: 64 goroutines × 200 cycles over 8 keys.
// Never two holders of one key, grants in FIFO order per key, no lost
// waiter, and exact reference sets.
func TestMutualExclusionUnderLoad(t *testing.T) {
	const (
		workers = 64
		cycles  = 200
		keys    = 8
	)
	// Sessions outlast the test, however loaded the machine.
	coord := newTestCoordinator(t, func(c *Config) { c.SessionTTL = time.Hour })
	for w := range workers {
		members(t, coord, fmt.Sprintf("node-%d", w))
	}

	var mu sync.Mutex
	queued := map[string][]string{} // key → request ids in enqueue order
	served := map[string][]string{} // key → queued request ids in the order they were served (granted or skipped)
	isQueued := map[string]bool{}
	coord.locks.trace = func(event string, typ typeIndex, resourceID, requestID string) {
		id := string(typeNames[typ]) + ":" + resourceID // FIFO is per key
		mu.Lock()
		defer mu.Unlock()
		switch event {
		case "queued":
			queued[id] = append(queued[id], requestID)
			isQueued[requestID] = true
		case "granted", "skipped", "refused":
			if isQueued[requestID] {
				served[id] = append(served[id], requestID)
			}
		}
	}

	var holders [keys]atomic.Int32
	var violations atomic.Int32
	wantRefs := make([]map[string]bool, keys)
	for i := range wantRefs {
		wantRefs[i] = map[string]bool{}
	}
	var refsMu sync.Mutex

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			node := fmt.Sprintf("node-%d", w)
			for i := range cycles {
				k := (w + i) % keys
				id := fmt.Sprintf("sha256:%064d", k)
				if i%50 == 0 {
					// A pull: the first succeeds, the rest skip and register.
					resp, err := coord.Acquire(ctx, api.LockRequest{Type: api.OperationPull, ResourceID: id, NodeID: node})
					if !assertNoErr(t, err) {
						return
					}
					if resp.Acquired {
						_, err = coord.Unlock(ctx, api.UnlockRequest{Type: api.OperationPull, ResourceID: id, LeaseID: resp.LeaseID, Success: true})
					} else {
						_, err = coord.AddRef(ctx, id, node)
					}
					if !assertNoErr(t, err) {
						return
					}
					refsMu.Lock()
					wantRefs[k][node] = true
					refsMu.Unlock()
					continue
				}
				resp, err := coord.Acquire(ctx, api.LockRequest{Type: api.OperationUpdate, ResourceID: id, NodeID: node})
				if !assertNoErr(t, err) {
					return
				}
				if !resp.Acquired {
					t.Errorf("update %s: not acquired: %+v", id, resp)
					return
				}
				if holders[k].Add(1) != 1 {
					violations.Add(1)
				}
				holders[k].Add(-1)
				_, err = coord.Unlock(ctx, api.UnlockRequest{Type: api.OperationUpdate, ResourceID: id, LeaseID: resp.LeaseID, Success: true})
				if !assertNoErr(t, err) {
					return
				}
			}
		})
	}
	wg.Wait()
	require.Zero(t, violations.Load(), "two holders of one key at once")

	mu.Lock()
	defer mu.Unlock()
	total := 0
	for id, q := range queued {
		require.Equal(t, q, served[id], "grants of %s out of FIFO order (or a waiter lost)", id)
		total += len(q)
	}
	t.Logf("%d requests queued and all served in FIFO order", total)
	require.Greater(t, total, workers, "the test must actually contend")

	for k := range keys {
		id := fmt.Sprintf("sha256:%064d", k)
		st, err := coord.Status(context.Background(), api.OperationUpdate, id, "", "")
		require.NoError(t, err)
		require.Nil(t, st.Holder)
		require.Empty(t, st.Queue)
		refs, err := coord.Refs(ctx, id)
		require.NoError(t, err)
		want := make([]string, 0, len(wantRefs[k]))
		for n := range wantRefs[k] {
			want = append(want, n)
		}
		require.ElementsMatch(t, want, refs.Nodes, "references of key %d", k)
		require.Equal(t, len(want), refs.Count)
	}
}

func assertNoErr(t *testing.T, err error) bool {
	if err != nil {
		t.Error(err)
		return false
	}
	return true
}
