package scale

import (
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestFits: a fleet fits while its connections (two per node) and the
// spare descriptors are within three quarters of the limit (the
// coordinator's), and its connections and journals (three per node) within
// the limit (the benchmark's process); beyond, the message names the limit
// and how many nodes fit.
func TestFits(t *testing.T) {
	if err := fits(5000, 1, 20000); err != nil {
		t.Fatalf("5,000 nodes under 20,000 descriptors: %v", err)
	}
	if err := fits(5000, 2, 20000); err == nil {
		t.Fatal("5,000 nodes with three connections each fit under 20,000 descriptors")
	}
	for _, c := range []struct {
		nofile uint64
		max    int
		where  string
	}{
		{20000, (20000 - spareFiles) / 3, "in the benchmark's process"}, // its journals bind first
		{1600, (1600*3/4 - spareFiles) / 2, "the coordinator serves"},   // a low limit: the coordinator's share
	} {
		if err := fits(c.max, 1, c.nofile); err != nil {
			t.Fatalf("%d nodes, the most that fit under %d: %v", c.max, c.nofile, err)
		}
		err := fits(c.max+1, 1, c.nofile)
		if err == nil {
			t.Fatalf("%d nodes fit under %d descriptors", c.max+1, c.nofile)
		}
		for _, want := range []string{c.where, "descriptor limit " + itoa(int(c.nofile)), "ulimit -Hn", "at most " + itoa(c.max) + " nodes"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("%q lacks %q", err, want)
			}
		}
	}
}

// TestNofileFor: the limit nofileFor asks for holds its fleet, and two
// descriptors less do not (the three quarters round down).
func TestNofileFor(t *testing.T) {
	pool := Config{Parallel: DefaultParallel}.conns()
	for _, n := range []int{100, 2600, 5000, 10000} {
		for _, conns := range []int{1, 2, pool} {
			want := nofileFor(n, conns)
			if err := fits(n, conns, want); err != nil {
				t.Errorf("%d nodes, %d connections each, under the %d they ask for: %v", n, conns, want, err)
			}
			if err := fits(n, conns, want-2); err == nil {
				t.Errorf("%d nodes, %d connections each, fit under %d, less than the %d they ask for", n, conns, want-2, want)
			}
		}
	}
}

// TestSized: a node's pool is bounded by what the descriptor limit leaves
// per node, never above what a node opens (Config.conns) nor below one;
// the bound fits, one more does not; a fixed count is kept.
func TestSized(t *testing.T) {
	cfg := Config{Parallel: DefaultParallel}
	for _, c := range []struct {
		n    int
		want int
	}{{1000, cfg.conns()}, {2600, 4}, {5000, 1}, {20000, 1}} {
		sc, conns := cfg.sized(c.n, 20000)
		if conns != c.want || sc.poolConns != conns {
			t.Errorf("%d nodes under 20,000: %d connections a node (pool %d), want %d", c.n, conns, sc.poolConns, c.want)
		}
		if conns < cfg.conns() && c.n < 7000 {
			if err := fits(c.n, conns, 20000); err != nil {
				t.Errorf("%d nodes with the bound %d: %v", c.n, conns, err)
			}
			if fits(c.n, conns+1, 20000) == nil {
				t.Errorf("%d nodes fit with %d connections each, above the bound %d", c.n, conns+1, conns)
			}
		}
	}
	if _, conns := (Config{ShortConns: 2, SessionConn: true}).sized(5000, 20000); conns != 3 {
		t.Errorf("a fixed count: %d connections, want 3", conns)
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

// TestEventSeen: every resource named in what was read is noted at its
// first read only, and an event split across reads is not noted.
func TestEventSeen(t *testing.T) {
	var e eventSeen
	t0, t1 := time.Unix(1, 0), time.Unix(2, 0)
	e.note([]byte("event: completed\ndata: {\"type\":\"pull\",\"resource_id\":\"sha256:a\",\"request_id\":\"r1\"}\n\n"+
		"event: completed\ndata: {\"resource_id\":\"sha256:b\"}\n\nevent: completed\ndata: {\"resource_id\":\"sha256:c"), t0)
	e.note([]byte(`"resource_id":"sha256:a"`), t1)
	if at, ok := e.take("sha256:a"); !ok || !at.Equal(t0) {
		t.Errorf("a: %v %v, want its first read", at, ok)
	}
	if at, ok := e.take("sha256:b"); !ok || !at.Equal(t0) {
		t.Errorf("b: %v %v", at, ok)
	}
	if _, ok := e.take("sha256:c"); ok {
		t.Error("c, split across reads, was noted")
	}
	if _, ok := e.take("sha256:a"); ok {
		t.Error("a taken twice")
	}
}

// TestQueuedAt: only a lock answer "queued" marks its resource.
func TestQueuedAt(t *testing.T) {
	var q queuedAt
	q.note([]byte(`{"type":"pull","resource_id":"x"}`), []byte(`{"queued":true}`))
	q.note([]byte(`{"type":"pull","resource_id":"y"}`), []byte(`{"skip":true}`))
	if !q.take("x") || q.take("x") {
		t.Error("x: want queued once")
	}
	if q.take("y") {
		t.Error("y was answered skip, not queued")
	}
}
