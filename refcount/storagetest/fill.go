package storagetest

import (
	"context"
	"fmt"

	"github.com/sharedcontent/sharedcontent/refcount"
)

// fillBatch is how many references one Commit of Fill adds.
const fillBatch = 20000

// Fill adds n reference sets to s, one per resource, each naming the nodes
// "node-0" … "node-(nodesPer-1)" (at least one). The resource IDs are
// sha256 digests of their index, so they spread over the key space as
// real ones do; ResourceID(i) names the i-th. It is for benchmarks that
// need a large state (docs/design.md §10: paging at 1M references).
func Fill(ctx context.Context, s refcount.Storage, n, nodesPer int) error {
	nodesPer = max(1, nodesPer)
	var b refcount.Batch
	for i := range n {
		for j := range nodesPer {
			b.AddRef(ResourceID(i), fmt.Sprintf("node-%d", j))
		}
		if b.Len() >= fillBatch || i == n-1 {
			if err := s.Commit(ctx, &b); err != nil {
				return fmt.Errorf("fill: %w", err)
			}
			b = refcount.Batch{}
		}
	}
	return nil
}

// ResourceID is the resource ID Fill gives its i-th reference set: a
// sha256 digest-shaped string (not the digest of anything).
func ResourceID(i int) string {
	return fmt.Sprintf("sha256:%016x%048x", uint64(i)*0x9e3779b97f4a7c15, i)
}
