package integration

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/sharedcontent/sharedcontent/contentv2/contentv2test"
)

// mountTmpfs mounts a tmpfs of size bytes on a new directory and returns
// it; the test skips when it cannot (not root).
func mountTmpfs(t *testing.T, size int64) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: mounts a small tmpfs as the shared root to fill it")
	}
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size="+strconv.FormatInt(size, 10)); err != nil {
		t.Skipf("cannot mount a tmpfs on %s: %v", dir, err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
	return dir
}

// fill writes a file into dir until the filesystem is full and returns it.
func fill(t *testing.T, dir string) string {
	t.Helper()
	p := filepath.Join(dir, "filler")
	f, err := os.Create(p)
	require.NoError(t, err)
	defer f.Close()
	chunk := make([]byte, 64<<10)
	for {
		if _, err := f.Write(chunk); err != nil {
			require.True(t, errors.Is(err, syscall.ENOSPC), "filling %s: %v", dir, err)
			return p
		}
	}
}

// ingestDirs lists the shared root's ingest directories, each with the
// bytes its data holds.
func ingestDirs(t *testing.T, root string) map[string]int64 {
	t.Helper()
	ents, err := os.ReadDir(filepath.Join(root, "ingest"))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	require.NoError(t, err)
	out := map[string]int64{}
	for _, e := range ents {
		fi, err := os.Stat(filepath.Join(root, "ingest", e.Name(), "data"))
		if err != nil {
			out[e.Name()] = -1
			continue
		}
		out[e.Name()] = fi.Size()
	}
	return out
}

// TestFullRootLeavesNothingBehind: the shared root (a small tmpfs) is full,
// so a pull fails writing its layers. A failed ingest write discards the
// ingest (docs/design.md §8), so no partial ingest keeps space; once space
// is freed, the next pull succeeds at the first try, and leaves no ingest.
//
// Before, a failed write left its partial ingest, keeping its space, and
// the pull after space was freed resumed it with a Range request, which
// the test registry (go-containerregistry's) answers 416: it only
// understands closed ranges. (Registries that serve open ranges resume
// it; the space stayed taken either way.)
func TestFullRootLeavesNothingBehind(t *testing.T) {
	e := newFaultEnv(t, faultConfig())
	e.root = mountTmpfs(t, 8<<20)
	ctx := nsContext()
	img, err := e.reg.PushRandom(context.Background(), "test/full:v1", 4, 1<<20)
	require.NoError(t, err)
	n1, n2 := e.addNode("node-1"), e.addNode("node-2")
	e.coord.waitSynced(t, "node-1", "node-2")

	// A root in use: its blobs/ exists. Fill it, then leave about half a
	// layer free.
	require.NoError(t, os.MkdirAll(filepath.Join(e.root, "blobs", "sha256"), 0o755))
	filler := fill(t, e.root)
	require.NoError(t, os.Truncate(filler, mustSize(t, filler)-(512<<10)))
	full := n1.counter("sharedcontent_root_free_bytes")
	require.LessOrEqual(t, full, float64(512<<10), "sharedcontent_root_free_bytes of the full root")

	// One fetch at a time, so that the failed write is what ends each
	// pull: a fetch cancelled by another's failure keeps its partial
	// ingest for a resume, as containerd's own store does.
	for _, n := range []*faultNode{n1, n2} {
		pctx, cancel := context.WithTimeout(ctx, time.Minute)
		_, err := contentv2test.Pull(pctx, n.CS, img.Ref, contentv2test.PullOptions{Concurrency: 1})
		cancel()
		require.ErrorIs(t, err, syscall.ENOSPC, "pull on %s with the root full", n.id)
		require.Empty(t, ingestDirs(t, e.root), "ingests left by the failed pull on %s", n.id)
		require.Equal(t, 1.0, n.counter("sharedcontent_store_ingests_discarded_total", "op", "write"), "%s: ingests discarded", n.id)
	}

	require.NoError(t, os.Remove(filler))
	require.Greater(t, n1.counter("sharedcontent_root_free_bytes"), full+float64(4<<20), "sharedcontent_root_free_bytes once space is freed")
	for _, n := range []*faultNode{n1, n2} {
		require.NoError(t, n.pullImage(time.Minute, img), "first pull on %s once space is freed", n.id)
		requireImage(t, ctx, n.Node, img)
		require.Empty(t, ingestDirs(t, e.root), "ingests left by the pull on %s", n.id)
	}
	requireReadable(t, ctx, n1, n2)
}

func mustSize(t *testing.T, p string) int64 {
	t.Helper()
	fi, err := os.Stat(p)
	require.NoError(t, err)
	return fi.Size()
}
