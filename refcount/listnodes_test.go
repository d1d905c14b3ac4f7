package refcount_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/containerd/errdefs"
	"github.com/stretchr/testify/require"

	"github.com/sharedcontent/sharedcontent/refcount"
)

// TestListNodes (docs/design.md §10.3): a Manager's ListNodes answers the
// pages List answers, each set as its NodeList, on bbolt (its own read
// path) and in memory (List underneath), page after page; a bad limit is
// refused as List refuses it.
func TestListNodes(t *testing.T) {
	ctx := context.Background()
	for name, s := range map[string]refcount.Storage{
		"bolt":   openBolt(t, filepath.Join(t.TempDir(), "refcount.db")),
		"memory": refcount.NewMemoryStorage(),
	} {
		t.Run(name, func(t *testing.T) {
			var b refcount.Batch
			for i := range 25 {
				for j := range 1 + i%4 {
					b.AddRef(fmt.Sprintf("sha256:%03d", i), fmt.Sprintf("node-%d", (i+j)%5))
				}
			}
			require.NoError(t, s.Commit(ctx, &b))
			m := refcount.NewManager(s)
			for _, limit := range []int{1, 4, 25, 100} {
				after, pages := "", 0
				for {
					want, err := s.List(ctx, after, limit)
					require.NoError(t, err)
					got, err := m.ListNodes(ctx, after, limit)
					require.NoError(t, err)
					require.Len(t, got, len(want))
					for i, e := range want {
						require.Equal(t, refcount.NodesEntry{ResourceID: e.ResourceID, Nodes: e.Refs.NodeList()}, got[i])
					}
					pages++
					if len(got) < limit {
						break
					}
					after = got[len(got)-1].ResourceID
				}
				require.Equal(t, 25/limit+1, pages, "limit %d", limit)
			}
			_, err := m.ListNodes(ctx, "", 0)
			require.ErrorIs(t, err, errdefs.ErrInvalidArgument)
		})
	}
}
