package contentv2

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestMarkerObservation: the reaper's measure of a marker's staleness
// counts from when it first saw the marker's current state, on its own
// clock; any change (content, or the marker appearing or going) restarts
// it, and so does a new memory (a reaper restarted or moved).
func TestMarkerObservation(t *testing.T) {
	root := t.TempDir()
	mem := &ReapMemory{markers: map[string]markerSeen{}}
	t0 := time.Now()
	at := func(d time.Duration) time.Time { return t0.Add(d) }

	require.Zero(t, mem.observeMarker(root, "n1", at(0)), "a missing marker is a state, first seen now")
	require.Equal(t, time.Minute, mem.observeMarker(root, "n1", at(time.Minute)))

	require.NoError(t, writeMarker(root, NodeMarker{NodeID: "n1", Seq: 1}, true))
	require.Zero(t, mem.observeMarker(root, "n1", at(2*time.Minute)), "the marker appeared")
	require.Equal(t, time.Hour, mem.observeMarker(root, "n1", at(2*time.Minute+time.Hour)))

	require.NoError(t, writeMarker(root, NodeMarker{NodeID: "n1", Seq: 2}, false))
	require.Zero(t, mem.observeMarker(root, "n1", at(3*time.Hour)), "a refresh restarts the observation")

	// The same content rewritten: its mtime changed.
	path := filepath.Join(nodesDir(root), "n1")
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, time.Hour, mem.observeMarker(root, "n1", at(4*time.Hour)))
	later := time.Now().Add(time.Hour)
	require.NoError(t, os.WriteFile(path, b, 0o644))
	require.NoError(t, os.Chtimes(path, later, later))
	require.Zero(t, mem.observeMarker(root, "n1", at(5*time.Hour)))

	fresh := &ReapMemory{markers: map[string]markerSeen{}}
	require.Zero(t, fresh.observeMarker(root, "n1", at(6*time.Hour)), "a new memory starts over")
	require.Equal(t, time.Hour, mem.observeMarker(root, "n1", at(6*time.Hour)))
}
