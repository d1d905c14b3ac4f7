package lockclient

import (
	"context"
	"fmt"
	"net"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sharedcontent/sharedcontent/lockserver/api"
	"github.com/sharedcontent/sharedcontent/lockserver/httpserver"
	"github.com/sharedcontent/sharedcontent/lockserver/lockservertest"
)

// BenchmarkWaitStreams measures what N nodes × 10 waits hold at the
// coordinator once every wait is queued: event streams (by kind) and open
// TCP connections, with a stream per waiting request (clients before the
// node stream) and with one stream per node (docs/design.md §10.1). Every node is a member, so the limit in all is
// StreamsPerMember×N + StreamSlack; per-request waits over it poll.
// NODES sets N (default 100): NODES=1000 go test -run - -bench WaitStreams -benchtime 1x ./lockclient/
func BenchmarkWaitStreams(b *testing.B) {
	nodes := 100
	if v, err := strconv.Atoi(os.Getenv("NODES")); err == nil && v > 0 {
		nodes = v
	}
	for _, mode := range []string{"per-request", "per-node"} {
		b.Run(fmt.Sprintf("nodes=%d/waits=10/%s", nodes, mode), func(b *testing.B) {
			for range b.N {
				benchWaitStreams(b, nodes, 10, mode == "per-request")
			}
		})
	}
}

// countingListener counts the connections open now.
type countingListener struct {
	net.Listener
	open atomic.Int64
}

type countedConn struct {
	net.Conn
	l    *countingListener
	once sync.Once
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	l.open.Add(1)
	return &countedConn{Conn: c, l: l}, nil
}

func (c *countedConn) Close() error {
	c.once.Do(func() { c.l.open.Add(-1) })
	return c.Conn.Close()
}

func benchWaitStreams(b *testing.B, nodes, waits int, perRequest bool) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	core := lockservertest.NewCoordinator(b)
	h := httpserver.NewHandler(core, httpserver.WithStreamLimits(1<<20, 1<<20, 1<<20))
	reg := prometheus.NewRegistry()
	reg.MustRegister(h.StreamMetrics())
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	ln := &countingListener{Listener: raw}
	srv := h.HTTPServer()
	go func() { _ = srv.Serve(ln) }()
	defer func() { h.Drain(); _ = srv.Shutdown() }()
	url := "http://" + raw.Addr().String()

	holder, err := New(url, WithNodeID("holder"))
	if err != nil {
		b.Fatal(err)
	}
	defer holder.Close()
	var held []*LockResult
	for j := range waits {
		res, err := holder.Lock(ctx, api.LockRequest{Type: api.OperationUpdate, ResourceID: fmt.Sprintf("sha256:waitstreams-%d", j)})
		if err != nil {
			b.Fatal(err)
		}
		held = append(held, res)
	}
	var wg sync.WaitGroup
	for i := range nodes {
		node := fmt.Sprintf("node-%d", i)
		if _, err := core.Session(ctx, api.SessionRequest{NodeID: node}); err != nil {
			b.Fatal(err)
		}
		c, err := New(url, WithNodeID(node), WithPollInterval(time.Second))
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		c.http.perRequestStreams = perRequest
		// A node's waits start one after the other, each once the one
		// before is queued, so that its short requests share one
		// connection (a burst would open one per request).
		queued := make(chan struct{}, waits)
		c.http.onQueued = func(api.LockRequest) { queued <- struct{}{} }
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range waits {
				wg.Add(1)
				go func() {
					defer wg.Done()
					res, err := c.Lock(ctx, api.LockRequest{Type: api.OperationUpdate, ResourceID: fmt.Sprintf("sha256:waitstreams-%d", j)})
					if err == nil {
						_ = c.Unlock(context.Background(), res.Lease, true, nil)
					}
				}()
				select {
				case <-queued:
				case <-ctx.Done():
					return
				}
			}
		}()
	}
	// Every wait queued, and its stream (or its node's) open or refused.
	want := nodes
	if perRequest {
		// Sessions without an instance ID are in the older shape
		// (docs/design.md §10.7): their per-request streams have a share
		// of their own, which the server reports.
		want = min(nodes*waits, gatheredGauge(reg, "sharedcontent_event_streams_limit", "older_share"))
	}
	deadline := time.Now().Add(5 * time.Minute)
	for {
		queued := 0
		for j := range waits {
			st, err := core.Status(ctx, api.OperationUpdate, fmt.Sprintf("sha256:waitstreams-%d", j), "", "")
			if err != nil {
				b.Fatal(err)
			}
			queued += st.QueueLength
		}
		if queued == nodes*waits && gatheredStreams(reg) >= want {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("%d of %d waits queued, %d streams", queued, nodes*waits, gatheredStreams(reg))
		}
		time.Sleep(50 * time.Millisecond) // a measurement's poll, not a synchronisation of the code under test
	}
	b.ReportMetric(float64(gatheredStreams(reg)), "streams")
	b.ReportMetric(float64(ln.open.Load()), "conns")
	b.ReportMetric(float64(nodes*waits), "waits")
	for _, res := range held {
		_ = holder.Unlock(ctx, res.Lease, true, nil)
	}
	cancel()
	wg.Wait()
}

// gatheredStreams sums sharedcontent_event_streams_open over its kinds.
func gatheredStreams(reg *prometheus.Registry) int {
	return gatheredGauge(reg, "sharedcontent_event_streams_open", "")
}

// gatheredGauge sums the gauge name over its series, or takes the series
// whose one label has the value label when label is not empty; -1 when
// the registry cannot be read.
func gatheredGauge(reg *prometheus.Registry, name, label string) int {
	mfs, err := reg.Gather()
	if err != nil {
		return -1
	}
	n := 0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if label == "" || (len(m.GetLabel()) == 1 && m.GetLabel()[0].GetValue() == label) {
				n += int(m.GetGauge().GetValue())
			}
		}
	}
	return n
}
