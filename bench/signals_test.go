package main

import (
	"context"
	"errors"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sharedcontent/sharedcontent/bench/scale"
)

// TestUntilDoneStopsOnSIGTERM: a SIGTERM ends the wait for a section that
// does not look at the context (it would run on), with an error saying
// so; a section that ends first gives its own error.
//
// Before: the benchmark caught SIGTERM (signal.NotifyContext) and ran on
// to the end of every section that ignores the context.
func TestUntilDoneStopsOnSIGTERM(t *testing.T) {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	release := make(chan struct{})
	defer close(release)
	ignoresCtx := func() error { <-release; return nil }

	own := errors.New("section failed")
	require.ErrorIs(t, untilDone(ctx, func() error { return own }), own)

	done := make(chan error, 1)
	go func() { done <- untilDone(ctx, ignoresCtx) }()
	require.NoError(t, syscall.Kill(os.Getpid(), syscall.SIGTERM))
	select {
	case err := <-done:
		require.ErrorContains(t, err, "interrupted")
	case <-time.After(time.Minute): // a bound on a hang, not a synchronisation
		t.Fatal("untilDone still waits a minute after SIGTERM")
	}
}

// TestOutDirCreated: `-out DIR` writes BENCHMARKS.md into a DIR that does
// not exist yet (or has no BENCHMARKS.md), for the scale section alone
// (which splices its block) and for the others (the whole doc).
//
// Before: the scale/HA-only run failed (exit 1) on a DIR that did not
// exist.
func TestOutDirCreated(t *testing.T) {
	res := &scale.Results{Rollout: []scale.RolloutResult{{Nodes: 7, Blobs: 10, Wall: time.Second, Downloads: []int64{1}}}}
	for name, r := range map[string]*report{
		"scale only": {cfg: config{sections: map[string]bool{"scale": true}}, scale: res, scaleStarted: time.Now()},
		"whole doc":  {cfg: config{sections: map[string]bool{"lock": true}}},
	} {
		t.Run(name, func(t *testing.T) {
			r.cfg.out = filepath.Join(t.TempDir(), "new", "docs")
			require.NoError(t, r.write())
			doc, err := os.ReadFile(filepath.Join(r.cfg.out, "BENCHMARKS.md"))
			require.NoError(t, err)
			require.NotEmpty(t, doc)
			if r.scale != nil {
				_, block, _ := cutBlock(doc)
				require.Contains(t, string(block), "| 7 |")
			}
		})
	}
}
