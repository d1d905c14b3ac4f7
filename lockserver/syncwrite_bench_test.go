package lockserver

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/sharedcontent/sharedcontent/lockserver/api"
	"github.com/sharedcontent/sharedcontent/refcount"
)

// BenchmarkSyncDone: the done of one node's first full sync of refs
// references on bbolt (the write docs/design.md §10.5 makes without the
// members' mutex); the chunks before it are not timed. Each iteration is
// one sync on a fresh store.
//
//	go test -run '^$' -bench SyncDone -benchtime 1x ./lockserver/
func BenchmarkSyncDone(b *testing.B) {
	for _, refs := range []int{30_000, 100_000} {
		b.Run(fmt.Sprintf("refs=%d", refs), func(b *testing.B) {
			ids := make([]string, refs)
			for i := range ids {
				ids[i] = fmt.Sprintf("sha256:%064x", uint64(i)*0x9e3779b97f4a7c15) // not in order
			}
			for range b.N {
				b.StopTimer()
				benchSyncDone(b, ids)
			}
		})
	}
}

func benchSyncDone(b *testing.B, ids []string) {
	ctx := context.Background()
	s, err := refcount.OpenBoltStorage(filepath.Join(b.TempDir(), "refs.db"))
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	c, err := NewCoordinator(DefaultConfig(), Options{Refs: refcount.NewManager(s)})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	a, err := c.Session(ctx, api.SessionRequest{NodeID: "big"})
	if err != nil {
		b.Fatal(err)
	}
	sent := 0
	for ; sent+api.MaxSyncChunk < len(ids); sent += api.MaxSyncChunk {
		if _, err := c.SyncRefs(ctx, "big", api.SyncRequest{SyncID: "s", ResourceIDs: ids[sent : sent+api.MaxSyncChunk]}); err != nil {
			b.Fatal(err)
		}
	}
	done := api.SyncRequest{SyncID: "s", ResourceIDs: ids[sent:], Done: true,
		Echo: &api.Echo{Epoch: a.Epoch, StampMs: a.StampMs}}
	b.StartTimer()
	if _, err := c.SyncRefs(ctx, "big", done); err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
}
