package httpserver

import (
	"context"
	"fmt"
	"net"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/sharedcontent/sharedcontent/lockserver"
	"github.com/sharedcontent/sharedcontent/lockserver/api"
)

// BenchmarkStopDuringBigSync (docs/design.md §10.5): a node's first sync
// of SHAREDCONTENT_BENCH_REFS references (1,000,000 by default) over HTTP
// to a server on bbolt; once its done is being written (some of its
// references are stored), the server is shut down as SIGTERM does
// (Shutdown with the 10 s drain-timeout). It reports how long the done's
// write ran before the shutdown, how long Shutdown took (the target: 5 s),
// and how many of the references were stored when it returned.
//
//	go test -run '^$' -bench StopDuringBigSync -benchtime 1x -timeout 0 ./lockserver/httpserver/
func BenchmarkStopDuringBigSync(b *testing.B) {
	refs := 1_000_000
	if v, err := strconv.Atoi(os.Getenv("SHAREDCONTENT_BENCH_REFS")); err == nil {
		refs = v
	}
	ids := make([]string, refs)
	for i := range ids {
		ids[i] = fmt.Sprintf("sha256:%064x", i)
	}
	for range b.N {
		s, err := Open(Config{Config: lockserver.DefaultConfig(), DataDir: b.TempDir()})
		if err != nil {
			b.Fatal(err)
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		served := make(chan error, 1)
		go func() { served <- s.Serve(ln) }()
		big := &wireNode{base: "http://" + ln.Addr().String(), id: "big"}
		if err := big.session(); err != nil {
			b.Fatal(err)
		}
		zero := 0
		if _, err := big.sync(api.SyncRequest{Step: api.SyncStepAnnounce, SyncID: "b1", Generation: "g1", ResourceIDs: []string{}, Offset: &zero}); err != nil {
			b.Fatal(err)
		}
		sent := 0
		for ; sent+api.MaxSyncChunk < refs; sent += api.MaxSyncChunk {
			if err := big.session(); err != nil {
				b.Fatal(err)
			}
			offset := sent
			if _, err := big.sync(api.SyncRequest{Step: api.SyncStepChunk, SyncID: "b1", Generation: "g1", ResourceIDs: ids[sent : sent+api.MaxSyncChunk], Offset: &offset}); err != nil {
				b.Fatal(err)
			}
		}
		if err := big.session(); err != nil {
			b.Fatal(err)
		}
		offset := sent
		doneStart := time.Now()
		answered := make(chan error, 1)
		go func() {
			_, err := big.sync(api.SyncRequest{Step: api.SyncStepDone, SyncID: "b1", Generation: "g1", ResourceIDs: ids[sent:], Offset: &offset, Done: true, Echo: big.echo()})
			answered <- err
		}()
		// The write is under way once one of 200 sampled references
		// is stored (a slice committed): observed, not timed.
		tick := time.NewTicker(5 * time.Millisecond)
		for stored(s.Coordinator, ids, 200) == 0 {
			select {
			case err := <-answered:
				b.Fatalf("the done was answered before any slice was seen: %v", err)
			case <-tick.C:
			}
		}
		tick.Stop()
		wrote := time.Since(doneStart)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		stopStart := time.Now()
		err = s.Shutdown(ctx)
		stop := time.Since(stopStart)
		cancel()
		if err != nil {
			b.Logf("shutdown: %v", err)
		}
		<-served
		doneErr := <-answered
		b.Logf("%d references: the done wrote for %s, then Shutdown took %s; the done: %v", refs, wrote, stop, doneErr)
		b.ReportMetric(float64(wrote.Milliseconds()), "written-ms")
		b.ReportMetric(float64(stop.Milliseconds()), "stop-ms")
	}
}

// stored counts, of n references sampled evenly from ids, those stored.
func stored(c *lockserver.Coordinator, ids []string, n int) int {
	k := 0
	for i := 0; i < len(ids); i += max(1, len(ids)/n) {
		if rc, err := c.Refs(context.Background(), ids[i]); err == nil && len(rc.Nodes) > 0 {
			k++
		}
	}
	return k
}
