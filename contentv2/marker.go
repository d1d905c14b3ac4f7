package contentv2

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/containerd/log"
)

// Node markers as evidence of life (docs/design.md §8.4). A running node
// rewrites its marker every session interval, whether or not the
// coordinator answers, with a new sequence number; the reaper remembers
// each marker's state and since when (its own monotonic clock) it has seen
// that state. A marker unchanged for the node expiry is one half of the
// evidence that the node is gone; the coordinator's own measure of its
// absence is the other (lockserver's Expire).

// refreshMarker rewrites this node's marker with the next sequence number.
// Only the session loop calls it. A failure is logged: the marker then
// looks unchanged, which expires the node only if the coordinator has not
// heard from it either for the node expiry.
func (s *store) refreshMarker() {
	s.markerSeq++
	m := NodeMarker{NodeID: s.nodeID, StartedAt: s.startedAt, Seq: s.markerSeq, WrittenAt: time.Now().UTC()}
	if err := s.guard.do(context.Background(), "marker", func() error { return writeMarker(s.root, m, false) }); err != nil {
		log.L.WithError(err).WithField("node", s.nodeID).Warn("refreshing this node's marker in the shared root; " +
			"a node whose marker stops changing may be expired once the coordinator has not heard from it for --node-expiry")
	}
}

// writeMarker writes m as its node's marker, atomically; durably when
// sync. A refresh needs no fsync: an update lost in a crash makes the
// marker change back, which only restarts the reaper's observation.
func writeMarker(root string, m NodeMarker, sync bool) error {
	// Only the first write, at start on a verified root, creates the
	// directory: a refresh into a root that vanished meanwhile must fail,
	// not recreate it on the local disk below (docs/design.md §8.19).
	if sync {
		if err := os.MkdirAll(nodesDir(root), 0o755); err != nil {
			return err
		}
	}
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	path := filepath.Join(nodesDir(root), m.NodeID)
	write := writeFileSync
	if !sync {
		write = func(p string, b []byte) error { return os.WriteFile(p, b, 0o644) }
	}
	if err := write(path+".tmp", b); err != nil {
		return err
	}
	return os.Rename(path+".tmp", path)
}

// markerState is what the reaper compares of a marker: its content, size
// and modification time. A missing marker is a state too.
type markerState struct {
	content string
	size    int64
	mtime   time.Time
	missing bool
}

func (a markerState) equal(b markerState) bool {
	return a.content == b.content && a.size == b.size && a.mtime.Equal(b.mtime) && a.missing == b.missing
}

// fingerprint is what the reaper reports of the state to the
// coordinator (docs/design.md §8.4): a hash of its content, size and
// mtime; "" for a missing marker, which is evidence of nothing (a reaper
// whose view of the root is empty sees every marker missing).
func (a markerState) fingerprint() string {
	if a.missing {
		return ""
	}
	h := sha256.New()
	_, _ = fmt.Fprintf(h, "%d\x00%d\x00", a.size, a.mtime.UnixNano())
	h.Write([]byte(a.content))
	return hex.EncodeToString(h.Sum(nil))
}

// readMarkerState reads node's marker as the reaper sees it.
func readMarkerState(root, node string) (markerState, error) {
	path := filepath.Join(nodesDir(root), node)
	fi, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return markerState{missing: true}, nil
	}
	if err != nil {
		return markerState{}, err
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return markerState{}, err
	}
	return markerState{content: string(bytes.TrimSpace(b)), size: fi.Size(), mtime: fi.ModTime()}, nil
}

// markerSeen is one marker's observation: its state, and when (the
// observer's monotonic clock) that state was first seen.
type markerSeen struct {
	state markerState
	since time.Time
}

// observeMarker records node's marker state at now and returns how long
// it has been seen unchanged. A marker that cannot be read restarts the
// observation (never proof of anything).
func (m *ReapMemory) observeMarker(root, node string, now time.Time) time.Duration {
	st, err := readMarkerState(root, node)
	if err != nil {
		delete(m.markers, node)
		return 0
	}
	seen, ok := m.markers[node]
	if !ok || !seen.state.equal(st) {
		m.markers[node] = markerSeen{state: st, since: now}
		return 0
	}
	return now.Sub(seen.since)
}

// markerReport is what the reaper tells the coordinator of node's marker
// as last observed.
func (m *ReapMemory) markerReport(node string) MarkerReport {
	seen, ok := m.markers[node]
	if !ok {
		return MarkerReport{}
	}
	return MarkerReport{State: seen.state.fingerprint()}
}
