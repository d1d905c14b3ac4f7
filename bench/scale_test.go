package main

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sharedcontent/sharedcontent/bench/scale"
)

// TestSpliceScale: the scale run rewrites its own block of the doc, in
// place, and keeps everything else; with no block yet it appends one.
func TestSpliceScale(t *testing.T) {
	path := filepath.Join(t.TempDir(), "BENCHMARKS.md")
	r := &report{cfg: config{sections: map[string]bool{"scale": true}}, scale: &scale.Results{
		Rollout: []scale.RolloutResult{{Nodes: 7, Blobs: 10, Wall: time.Second, Downloads: []int64{1}}},
	}, scaleStarted: time.Now()}

	if err := os.WriteFile(path, []byte("# Benchmarks\n\nhead\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := r.spliceScale(path); err != nil {
		t.Fatal(err)
	}
	first, _ := os.ReadFile(path)
	before, block, after := cutBlock(first)
	if string(before) != "# Benchmarks\n\nhead\n\n" || block == nil || len(after) != 0 {
		t.Fatalf("appended block: before %q, block %d bytes, after %q", before, len(block), after)
	}
	if !strings.Contains(string(block), "| 7 |") {
		t.Fatalf("block lacks the run's row:\n%s", block)
	}

	// Text after the block, and a new run: only the block changes.
	if err := os.WriteFile(path, append(first, []byte("tail\n")...), 0o644); err != nil {
		t.Fatal(err)
	}
	r.scale.Rollout[0].Nodes = 9
	if err := r.spliceScale(path); err != nil {
		t.Fatal(err)
	}
	second, _ := os.ReadFile(path)
	before2, block2, after2 := cutBlock(second)
	if string(before2) != string(before) || string(after2) != "tail\n" {
		t.Fatalf("the rest changed: before %q, after %q", before2, after2)
	}
	if !strings.Contains(string(block2), "| 9 |") || strings.Contains(string(block2), "| 7 |") {
		t.Fatalf("block not replaced:\n%s", block2)
	}

	// The other sections' run carries the block over.
	other := &report{cfg: config{sections: map[string]bool{"lock": true}}}
	if got := other.scaleBlock(path); string(got) != string(block2) {
		t.Fatalf("carried block:\n%s\nwant:\n%s", got, block2)
	}
}

// TestDocKeepsLevers: a run that rewrites the whole doc keeps the block of
// hand-measured levers as it is.
func TestDocKeepsLevers(t *testing.T) {
	path := filepath.Join(t.TempDir(), "BENCHMARKS.md")
	levers := leversBegin + "## Levers\n\n| a | 1.5× |\n" + leversEnd
	if err := os.WriteFile(path, []byte("# Benchmarks\n\nold\n\n"+levers), 0o644); err != nil {
		t.Fatal(err)
	}
	r := &report{cfg: config{sections: map[string]bool{"lock": true}}}
	if err := r.writeDoc(path); err != nil {
		t.Fatal(err)
	}
	doc, _ := os.ReadFile(path)
	if _, block, _ := cutMarked(doc, leversBegin, leversEnd); string(block) != levers {
		t.Fatalf("levers block %q, want %q", block, levers)
	}
	if strings.Contains(string(doc), "\nold\n") {
		t.Fatal("the rest of the doc was not rewritten")
	}
}

// TestScaleConnFlags: a node's short requests default to lockclient's
// pool; a negative count, and a session connection of its own beside the
// pool (which never queues a session call), are refused, naming the flags.
func TestScaleConnFlags(t *testing.T) {
	parse := func(args ...string) (scale.Config, error) {
		var s scaleFlags
		fs := flag.NewFlagSet("bench", flag.ContinueOnError)
		s.register(fs)
		if err := fs.Parse(args); err != nil {
			t.Fatal(err)
		}
		return s.config()
	}
	cfg, err := parse()
	if err != nil || cfg.ShortConns != 0 {
		t.Fatalf("defaults: %d short connections, %v; want the pool (0)", cfg.ShortConns, err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-scale-short-conns", "-1"}, "-scale-short-conns not negative"},
		{[]string{"-scale-session-conn"}, "-scale-session-conn needs -scale-short-conns N"},
	} {
		if _, err := parse(c.args...); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want an error saying %q", c.args, err, c.want)
		}
	}
	if cfg, err := parse("-scale-short-conns", "1", "-scale-session-conn"); err != nil || cfg.ShortConns != 1 || !cfg.SessionConn {
		t.Errorf("one connection and a session connection: %+v, %v", cfg, err)
	}
}
