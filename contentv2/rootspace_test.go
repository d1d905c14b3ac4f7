//go:build linux

package contentv2

import (
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// gatherSpace returns the root space series a registry gathers (absent:
// not in the map).
func gatherSpace(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	out := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			out[mf.GetName()] = m.GetGauge().GetValue()
		}
	}
	return out
}

// TestRootSpaceMetrics: the root's size and free space are those of the
// filesystem holding it, read at each scrape: on a tmpfs of 4 MiB (when
// root can mount one), the size is 4 MiB and free space falls by what a
// file takes.
func TestRootSpaceMetrics(t *testing.T) {
	root := t.TempDir()
	mounted := false
	if os.Geteuid() == 0 && unix.Mount("tmpfs", root, "tmpfs", 0, "size=4m") == nil {
		mounted = true
		t.Cleanup(func() { _ = unix.Unmount(root, unix.MNT_DETACH) })
	}
	reg := prometheus.NewRegistry()
	require.NoError(t, reg.Register(newRootSpace(root)))
	got := gatherSpace(t, reg)
	require.Contains(t, got, "sharedcontent_root_size_bytes")
	require.Contains(t, got, "sharedcontent_root_free_bytes")
	size, free := got["sharedcontent_root_size_bytes"], got["sharedcontent_root_free_bytes"]
	require.Positive(t, size)
	require.LessOrEqual(t, free, size)
	if !mounted {
		t.Log("not root: checked against the temp dir's filesystem only")
		return
	}
	require.Equal(t, float64(4<<20), size)
	require.NoError(t, os.WriteFile(filepath.Join(root, "f"), make([]byte, 1<<20), 0o644))
	after := gatherSpace(t, reg)["sharedcontent_root_free_bytes"]
	require.LessOrEqual(t, after, free-float64(1<<20), "free space after writing 1 MiB")
}

// TestRootSpaceHungFilesystem: a statfs that does not return (a hung
// filesystem) leaves the series out of the scrape instead of hanging it,
// and later scrapes start no second statfs while it hangs; once it
// returns, the series are back.
func TestRootSpaceHungFilesystem(t *testing.T) {
	rs := newRootSpace(t.TempDir())
	release := make(chan struct{})
	var calls atomic.Int32
	rs.stat = func(string) (space, error) {
		if calls.Add(1) == 1 {
			<-release
		}
		return space{size: 100, free: 40}, nil
	}
	_, ok := rs.read(10 * time.Millisecond)
	require.False(t, ok, "a hung statfs answers nothing")
	reg := prometheus.NewRegistry()
	require.NoError(t, reg.Register(rs))
	require.Empty(t, gatherSpace(t, reg), "a scrape while the filesystem hangs")
	require.Equal(t, int32(1), calls.Load(), "statfs calls while the first hangs")
	close(release)
	require.Eventually(t, func() bool {
		got := gatherSpace(t, reg)
		return got["sharedcontent_root_size_bytes"] == 100 && got["sharedcontent_root_free_bytes"] == 40
	}, time.Minute, 10*time.Millisecond)
}
