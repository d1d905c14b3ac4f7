package lockserver

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/sharedcontent/sharedcontent/internal/synchash"
	"github.com/sharedcontent/sharedcontent/lockserver/api"
	"github.com/sharedcontent/sharedcontent/refcount"
)

// BenchmarkSyncAfterRestart: every node of a cluster re-syncs after a coordinator
// restart, none of them changed: full (the whole journal, as older nodes
// do) against by hash (docs/design.md §10.4). The
// references are on bbolt; node i references blobs i·s … i·s+refs-1
// modulo 20·refs, so each blob has about nodes/20 references (shared
// images). Each iteration is the whole cluster's re-sync; the metrics are
// per cluster re-sync.
//
//	go test -run '^$' -bench SyncAfterRestart -benchtime 1x ./lockserver/
func BenchmarkSyncAfterRestart(b *testing.B) {
	const refs = 1000
	for _, nodes := range []int{100, 300, 1000} {
		for _, mode := range []string{"full", "hash"} {
			b.Run(fmt.Sprintf("%s/nodes=%d/refs=%d", mode, nodes, refs), func(b *testing.B) {
				benchSyncAfterRestart(b, mode == "hash", nodes, refs)
			})
		}
	}
}

func benchSyncAfterRestart(b *testing.B, byHash bool, nodes, refs int) {
	ctx := context.Background()
	s, err := refcount.OpenBoltStorage(filepath.Join(b.TempDir(), "refs.db"))
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	journals := make([][]string, nodes)
	blobs := 20 * refs
	for i := range journals {
		batch := new(refcount.Batch)
		for j := range refs {
			id := fmt.Sprintf("sha256:%064d", (i*refs/20+j)%blobs)
			journals[i] = append(journals[i], id)
			batch.AddRef(id, benchNode(i))
		}
		// Seen just now: the sessions after the restart write nothing.
		batch.PutMember(refcount.Member{ID: benchNode(i), FirstSeen: time.Now(), LastSeen: time.Now(), Generation: "g"})
		if err := s.Commit(ctx, batch); err != nil {
			b.Fatal(err)
		}
	}
	hashes := make([]api.SyncHash, nodes) // the nodes' own work, not timed
	for i, j := range journals {
		hashes[i] = api.SyncHash(synchash.FromIDs(j).Whole())
	}
	var requests, bytes int64
	var syncing, hashing time.Duration // in SyncRefs; in BuildHashes
	send := func(c *Coordinator, node string, req api.SyncRequest) api.SyncResponse {
		req.Generation = "g"
		data, _ := json.Marshal(req)
		requests++
		bytes += int64(len(data))
		start := time.Now()
		resp, err := c.SyncRefs(ctx, node, req)
		syncing += time.Since(start)
		if err != nil {
			b.Fatal(err)
		}
		return resp
	}
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		// A restart: a new coordinator over the same storage, every node
		// opening a session.
		c, err := NewCoordinator(DefaultConfig(), Options{Refs: refcount.NewManager(s)})
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		start := time.Now()
		if err := c.refs.BuildHashes(ctx); err != nil { // counted: a restart pays it
			b.Fatal(err)
		}
		hashing += time.Since(start)
		for i, journal := range journals {
			node := benchNode(i)
			if _, err := c.Session(ctx, api.SessionRequest{NodeID: node}); err != nil {
				b.Fatal(err)
			}
			zero := 0
			id := fmt.Sprintf("s%d", i)
			send(c, node, api.SyncRequest{SyncID: id, ResourceIDs: []string{}, Offset: &zero})
			if byHash {
				h := hashes[i]
				if !send(c, node, api.SyncRequest{SyncID: id, Offset: &zero, Hash: &h}).Synced {
					b.Fatal("hash differs")
				}
				continue
			}
			for off := 0; off < len(journal); off += api.MaxSyncChunk {
				chunk := journal[off:min(off+api.MaxSyncChunk, len(journal))]
				o := off
				send(c, node, api.SyncRequest{SyncID: id, ResourceIDs: chunk, Offset: &o, Done: off+len(chunk) == len(journal)})
			}
		}
		b.StopTimer()
		c.Close()
		b.StartTimer()
	}
	b.ReportMetric(float64(syncing.Milliseconds())/float64(b.N), "sync-ms/op")
	b.ReportMetric(float64(hashing.Milliseconds())/float64(b.N), "buildhashes-ms/op")
	b.ReportMetric(float64(requests)/float64(b.N), "requests/op")
	b.ReportMetric(float64(bytes)/float64(b.N), "bytes/op")
}

func benchNode(i int) string { return fmt.Sprintf("node-%04d", i) }
