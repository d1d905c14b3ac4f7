package httpserver

import (
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/containerd/errdefs"
	"github.com/stretchr/testify/require"

	"github.com/sharedcontent/sharedcontent/lockserver"
)

// TestOpenRefusesBadDataDir: a --data-dir that is not a
// writable directory is refused at start with an error naming the path
// and the flag; a missing one is created and served.
func TestOpenRefusesBadDataDir(t *testing.T) {
	refused := func(t *testing.T, dir string, want ...string) {
		t.Helper()
		s, err := Open(Config{Config: lockserver.DefaultConfig(), DataDir: dir})
		if err == nil {
			require.NoError(t, s.Shutdown(t.Context()))
		}
		require.Error(t, err)
		require.ErrorContains(t, err, "data dir "+dir+" ")
		require.ErrorContains(t, err, "--data-dir")
		for _, w := range want {
			require.ErrorContains(t, err, w)
		}
	}
	t.Run("regular file", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "data")
		require.NoError(t, os.WriteFile(dir, []byte("x"), 0o600))
		refused(t, dir, "is not a directory")
	})
	t.Run("not writable, even for root", func(t *testing.T) {
		// /proc is a directory in which nobody can create a file.
		if fi, err := os.Stat("/proc"); err != nil || !fi.IsDir() {
			t.Skip("no /proc here")
		}
		refused(t, "/proc", "is not writable")
	})
	t.Run("read-only permissions", func(t *testing.T) {
		if os.Geteuid() == 0 {
			t.Skip("running as root: permission bits do not stop root's writes (the /proc case covers an unwritable dir)")
		}
		dir := t.TempDir()
		require.NoError(t, os.Chmod(dir, 0o555))
		t.Cleanup(func() { os.Chmod(dir, 0o755) })
		refused(t, dir, "is not writable", "permission denied")
	})
	t.Run("missing dir is created", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "a", "data")
		ts := startServer(t, dir)
		code, _ := get(t, ts.url, "/readyz", nil)
		require.Equal(t, http.StatusOK, code)
		require.FileExists(t, filepath.Join(dir, DBFile))
		leftovers, err := filepath.Glob(filepath.Join(dir, ".datadircheck-*"))
		require.NoError(t, err)
		require.Empty(t, leftovers, "the check leaves nothing behind")
	})
}

// TestSecondCoordinatorOnDataDir: a second coordinator opened
// on a data dir another one holds is refused, with an error that says
// another coordinator holds that data dir, and names its process.
func TestSecondCoordinatorOnDataDir(t *testing.T) {
	dir := t.TempDir()
	first, err := Open(Config{Config: lockserver.DefaultConfig(), DataDir: dir})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, first.Shutdown(t.Context())) })

	second, err := Open(Config{Config: lockserver.DefaultConfig(), DataDir: dir})
	if err == nil {
		require.NoError(t, second.Shutdown(t.Context()))
	}
	require.Error(t, err)
	require.True(t, errdefs.IsUnavailable(err), "%v", err)
	require.ErrorContains(t, err, "another coordinator (pid "+strconv.Itoa(os.Getpid())+") holds data dir "+dir+":")
	require.ErrorContains(t, err, "--data-dir")
}
