package scale

import (
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestFits: a fleet fits while its connections (two per node) and the
// spare descriptors are within three quarters of the limit; beyond, the
// message names the limit and how many nodes fit.
func TestFits(t *testing.T) {
	if err := fits(5000, DefaultShortConns, 20000); err != nil {
		t.Fatalf("5,000 nodes under 20,000 descriptors: %v", err)
	}
	if err := fits(5000, 2, 20000); err == nil {
		t.Fatal("5,000 nodes with three connections each fit under 20,000 descriptors")
	}
	max := (20000*3/4 - spareFiles) / 2
	if err := fits(max, 1, 20000); err != nil {
		t.Fatalf("%d nodes, the most that fit: %v", max, err)
	}
	err := fits(max+1, 1, 20000)
	if err == nil {
		t.Fatalf("%d nodes fit under 20,000 descriptors", max+1)
	}
	for _, want := range []string{"descriptor limit 20000", "ulimit -Hn", "at most " + itoa(max) + " nodes"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%q lacks %q", err, want)
		}
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
