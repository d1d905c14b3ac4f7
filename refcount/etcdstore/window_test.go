package etcdstore_test

import (
	"context"
	"crypto/sha256"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/sharedcontent/sharedcontent/refcount"
)

// countingKV records the Count of every range read: how many keys etcd
// visited for it.
type countingKV struct {
	clientv3.KV
	mu     sync.Mutex
	reads  int
	visits int64
}

func (c *countingKV) Get(ctx context.Context, key string, opts ...clientv3.OpOption) (*clientv3.GetResponse, error) {
	resp, err := c.KV.Get(ctx, key, opts...)
	if err == nil {
		c.mu.Lock()
		c.reads++
		c.visits += resp.Count
		c.mu.Unlock()
	}
	return resp, err
}

// TestListWindows walks every reference set a page at a time, as
// BuildHashes and GET /refs/list do, over IDs of several shapes (digests,
// names sharing long prefixes, bytes of every kind) and sets of one to
// 1,500 nodes, and checks that the pages are the model's.
func TestListWindows(t *testing.T) {
	_, _, s, _ := startLeader(t, "/windows/")
	var ids []string
	for i := range 1200 {
		ids = append(ids, digest(i))
	}
	for i := range 300 {
		ids = append(ids, fmt.Sprintf("registry.example.com/a/very/long/common/prefix/of/names/%05d", i))
	}
	for i := range 200 {
		ids = append(ids, string([]byte{byte(1 + i%250), 0xff, byte(1 + i%200), 'x'}))
	}
	model := fillSets(t, s, ids, func(i int) int {
		if i == 5 || i == 1250 {
			return 1500 // sets larger than a read
		}
		return 1 + i%7
	})
	for _, limit := range []int{1, 100, 10_000} {
		require.Equal(t, model, walk(t, s, limit), "limit %d", limit)
	}
}

// TestListWindowsCost checks that a walk of every reference set a page
// at a time costs etcd O(keys), not O(keys²/keys per read): it counts
// the keys etcd visited for each read (every key between the read's
// start and its range end, the response's Count). Reading to the end of
// refs/ each time, as List did, visits about keys²/(2·keys per page):
// 20 times the keys here; windows visit about a read's keys per page (a
// page reads 1,000 keys for its 500), 5 times the keys with the first
// read's (docs/design.md §7.2).
func TestListWindowsCost(t *testing.T) {
	_, _, s, _ := startLeader(t, "/windows/")
	var ids []string
	for i := range 4000 {
		ids = append(ids, digest(i))
	}
	model := fillSets(t, s, ids, func(int) int { return 5 })
	kv := &countingKV{}
	s.WrapRefsKV(func(inner clientv3.KV) clientv3.KV { kv.KV = inner; return kv })
	require.Equal(t, model, walk(t, s, 100))
	refs := int64(5 * len(ids))
	t.Logf("%d references, %d reads, %d keys visited", refs, kv.reads, kv.visits)
	require.Less(t, kv.visits, 10*refs, "etcd visited %d keys for a walk of %d references", kv.visits, refs)
}

func digest(i int) string {
	return fmt.Sprintf("sha256:%x", sha256.Sum256(fmt.Appendf(nil, "blob-%d", i)))
}

// fillSets gives ids[i] nodes(i) nodes and returns the sets.
func fillSets(t *testing.T, s refcount.Storage, ids []string, nodes func(int) int) map[string][]string {
	model := map[string][]string{}
	batch := new(refcount.Batch)
	for i, id := range ids {
		for n := range nodes(i) {
			node := fmt.Sprintf("node-%04d", n)
			batch.AddRef(id, node)
			model[id] = append(model[id], node)
			if batch.Len() == refcount.GroupRefs {
				require.NoError(t, s.Commit(t.Context(), batch))
				batch = new(refcount.Batch)
			}
		}
	}
	require.NoError(t, s.Commit(t.Context(), batch))
	return model
}

// walk lists every set, limit at a time.
func walk(t *testing.T, s refcount.Storage, limit int) map[string][]string {
	got := map[string][]string{}
	after := ""
	for {
		page, err := s.List(t.Context(), after, limit)
		require.NoError(t, err)
		for _, e := range page {
			require.NotContains(t, got, e.ResourceID, "a set listed twice")
			got[e.ResourceID] = e.Refs.NodeList()
		}
		if len(page) < limit {
			return got
		}
		after = page[len(page)-1].ResourceID
	}
}
