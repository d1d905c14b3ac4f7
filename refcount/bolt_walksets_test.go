package refcount_test

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sharedcontent/sharedcontent/refcount"
)

// fillSets stores sets reference sets, set i of nodes i%7+1 nodes.
func fillSets(t *testing.T, s refcount.Storage, sets int) {
	b := new(refcount.Batch)
	for i := range sets {
		for n := range i%7 + 1 {
			b.AddRef(fmt.Sprintf("sha256:%064d", i), fmt.Sprintf("node-%03d", n))
		}
	}
	require.NoError(t, s.Commit(t.Context(), b))
}

// walked returns every set WalkSets hands over, copied.
func walked(t *testing.T, s *refcount.BoltStorage) []refcount.NodesEntry {
	var out []refcount.NodesEntry
	err := s.WalkSets(t.Context(), func(id []byte, nodes [][]byte) error {
		e := refcount.NodesEntry{ResourceID: string(id)}
		for _, n := range nodes {
			e.Nodes = append(e.Nodes, string(n))
		}
		out = append(out, e)
		return nil
	})
	require.NoError(t, err)
	return out
}

// TestWalkSetsEveryOnce: across read transactions of a few references
// each, the walk hands over every set once, in order, with its nodes in
// order: what ListNodes lists.
func TestWalkSetsEveryOnce(t *testing.T) {
	s := openBolt(t, filepath.Join(t.TempDir(), "refcount.db"))
	fillSets(t, s, 200)
	want, err := s.ListNodes(t.Context(), "", 1000)
	require.NoError(t, err)
	require.Len(t, want, 200)
	for _, chunk := range []int{1, 3, 10, 1_000_000} {
		restore := refcount.SetWalkChunk(chunk)
		txns := refcount.ReadTxns(s)
		require.Equal(t, want, walked(t, s), "chunk %d", chunk)
		// About one transaction per chunk references (sets of 1 to 7
		// nodes: 800 references and 200 sets).
		require.LessOrEqual(t, refcount.ReadTxns(s)-txns, 1000/chunk+1, "chunk %d", chunk)
		restore()
	}
	// fn's error ends the walk, wrapped.
	stop := fmt.Errorf("stop here")
	var calls int
	err = s.WalkSets(t.Context(), func([]byte, [][]byte) error {
		calls++
		return stop
	})
	require.ErrorIs(t, err, stop)
	require.Equal(t, 1, calls)
}

// TestWalkSetsLeavesNoPageResident: a walk of every set reads the pages
// of the file's sets, and lets go of them (MADV_DONTNEED) so the
// process's resident set does not keep them (docs/design.md §10.9);
// listing the same sets (ListNodes) keeps them mapped in, which shows the
// check can fail.
func TestWalkSetsLeavesNoPageResident(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("dropResident is Linux's madvise")
	}
	path := filepath.Join(t.TempDir(), "refcount.db")
	s := openBolt(t, path)
	fillSets(t, s, 5000)
	defer refcount.SetWalkChunk(1000)()
	// Listed: mapped in.
	page, err := s.ListNodes(t.Context(), "", 5000)
	require.NoError(t, err)
	require.Len(t, page, 5000)
	listed := mappedKB(t, path)
	require.Greater(t, listed, 100, "ListNodes read the sets through the mapping")
	// Walked: every set read again, none left mapped in.
	require.Len(t, walked(t, s), 5000)
	require.Zero(t, mappedKB(t, path), "after the walk (%d kB after ListNodes)", listed)
}

// mappedKB returns the resident kB of the process's mappings of path
// (/proc/self/smaps).
func mappedKB(t *testing.T, path string) int {
	f, err := os.Open("/proc/self/smaps")
	require.NoError(t, err)
	defer f.Close()
	total, in := 0, false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if fields := strings.Fields(line); len(fields) >= 5 && strings.Contains(fields[0], "-") && !strings.HasSuffix(fields[0], ":") {
			in = len(fields) >= 6 && fields[5] == path
			continue
		}
		if v, ok := strings.CutPrefix(line, "Rss:"); ok && in {
			kb, err := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")))
			require.NoError(t, err)
			total += kb
		}
	}
	require.NoError(t, sc.Err())
	return total
}
