package etcdstore_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/containerd/errdefs"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/sharedcontent/sharedcontent/internal/synchash"
	"github.com/sharedcontent/sharedcontent/refcount"
	"github.com/sharedcontent/sharedcontent/refcount/etcdstore"
)

// testModel: random batches of reference writes, with breaks, leave the
// etcd store as they leave the memory store, whatever the folding of
// writes to one key and the packing into transactions; and the two keys
// of every reference are both there or both gone (the index is exact).
func testModel(t *testing.T, l *leaders, cli *clientv3.Client) {
	rng := rand.New(rand.NewPCG(1, 2))
	prefix := fmt.Sprintf("/test/%s/", t.Name())
	s := l.campaign(t, prefix, etcdstore.Options{MaxTxnOps: 16})
	mem := refcount.NewMemoryStorage()
	gen := randomBatches(rng)
	committed := 0
	for range 150 {
		b := gen()
		err := s.Commit(t.Context(), b)
		if errors.Is(err, errdefs.ErrResourceExhausted) {
			continue // a group over 16 writes: nothing written, skip it
		}
		require.NoError(t, err)
		require.NoError(t, mem.Commit(t.Context(), b))
		committed++
		want, err := mem.List(t.Context(), "", 1000)
		require.NoError(t, err)
		got, err := s.List(t.Context(), "", 1000)
		require.NoError(t, err)
		require.Equal(t, entries(want), entries(got), "after batch %d", committed)
	}
	require.Greater(t, committed, 30, "too few batches fit")

	// Both directions of every reference, and nothing else.
	refsKeys, err := cli.Get(t.Context(), prefix+"refs/", clientv3.WithPrefix(), clientv3.WithKeysOnly())
	require.NoError(t, err)
	nodesKeys, err := cli.Get(t.Context(), prefix+"nodes/", clientv3.WithPrefix(), clientv3.WithKeysOnly())
	require.NoError(t, err)
	var fromRefs, fromNodes []string
	for _, kv := range refsKeys.Kvs {
		r, n, _ := strings.Cut(strings.TrimPrefix(string(kv.Key), prefix+"refs/"), "\x00")
		fromRefs = append(fromRefs, r+" "+n)
	}
	for _, kv := range nodesKeys.Kvs {
		n, rest, _ := strings.Cut(strings.TrimPrefix(string(kv.Key), prefix+"nodes/"), "\x00")
		r := rest[2:]
		require.Equal(t, fmt.Sprintf("%02x", synchash.Bucket(r)), rest[:2], "the index key's bucket")
		fromNodes = append(fromNodes, r+" "+n)
	}
	require.ElementsMatch(t, fromRefs, fromNodes)
}

// randomBatches returns a generator of random batches of reference
// writes, with breaks, over 12 resources and 4 nodes.
func randomBatches(rng *rand.Rand) func() *refcount.Batch {
	res := func() string { return fmt.Sprintf("r%d", rng.IntN(12)) }
	node := func() string { return fmt.Sprintf("n%d", rng.IntN(4)) }
	return func() *refcount.Batch {
		b := new(refcount.Batch)
		for range 1 + rng.IntN(8) {
			switch rng.IntN(6) {
			case 0, 1:
				b.AddRef(res(), node())
			case 2:
				b.RemoveRef(res(), node())
			case 3:
				b.DropRefs(res())
			case 4:
				refs := map[string]struct{}{}
				for range rng.IntN(4) {
					refs[res()] = struct{}{}
				}
				b.ReplaceNode(node(), refs)
			case 5:
				bucket := synchash.Bucket(res())
				refs := map[string]struct{}{}
				for range rng.IntN(6) {
					if id := res(); synchash.Bucket(id) == bucket {
						refs[id] = struct{}{}
					}
				}
				b.ReplaceNodeBuckets(node(), []int{bucket}, refs)
			}
			if rng.IntN(3) == 0 {
				b.Break()
			}
		}
		return b
	}
}

// entries renders a List page for comparison.
func entries(page []refcount.Entry) []string {
	var out []string
	for _, e := range page {
		out = append(out, e.ResourceID+":"+strings.Join(e.Refs.NodeList(), ","))
	}
	return out
}
