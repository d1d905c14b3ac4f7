package contentv2_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/containerd/errdefs"
	"github.com/opencontainers/go-digest"
	"github.com/stretchr/testify/require"

	"github.com/sharedcontent/sharedcontent/contentv2"
	"github.com/sharedcontent/sharedcontent/contentv2/remote"
	"github.com/sharedcontent/sharedcontent/lockclient"
	"github.com/sharedcontent/sharedcontent/lockserver/httpserver"
	"github.com/sharedcontent/sharedcontent/lockserver/lockservertest"
)

// httpCoordinator starts a real coordinator on loopback and returns it
// and a client of it for node.
func httpCoordinator(t *testing.T, node string) (*httpserver.Server, contentv2.Coordinator) {
	t.Helper()
	coord := lockservertest.Start(t)
	c, err := lockclient.New(coord.URL(), lockclient.WithNodeID(node))
	require.NoError(t, err)
	return coord.HTTPServer(), remote.New(c)
}

// TestNewStoreRefusesBadRoot: a root that is not a writable
// directory supporting rename, on one filesystem, is refused at start
// with an error naming the path and what to fix, before the node joins the
// cluster; a good root (even a missing one) is accepted and left clean.
func TestNewStoreRefusesBadRoot(t *testing.T) {
	ctx := context.Background()
	newStore := func(t *testing.T, root string) (*httpserver.Server, contentv2.Store, error) {
		srv, coord := httpCoordinator(t, "node-1")
		cs, err := contentv2.NewStore(root, "node-1", coord, contentv2.WithStateDir(t.TempDir()))
		if err == nil {
			t.Cleanup(func() { cs.Close() })
		}
		return srv, cs, err
	}
	refused := func(t *testing.T, root string, want ...string) {
		t.Helper()
		srv, _, err := newStore(t, root)
		require.Error(t, err)
		require.ErrorIs(t, err, errdefs.ErrFailedPrecondition)
		require.ErrorContains(t, err, "shared root "+root+" ")
		for _, w := range want {
			require.ErrorContains(t, err, w)
		}
		nodes, nerr := srv.Coordinator.Nodes(ctx)
		require.NoError(t, nerr)
		require.Empty(t, nodes.Nodes, "a refused node does not join the cluster")
	}

	t.Run("regular file", func(t *testing.T) {
		root := filepath.Join(t.TempDir(), "content")
		require.NoError(t, os.WriteFile(root, []byte("not a directory\n"), 0o600))
		refused(t, root, "is not a directory (it is a regular file)", "point the root (--root) at a directory")
		b, err := os.ReadFile(root)
		require.NoError(t, err)
		require.Equal(t, "not a directory\n", string(b), "the file is left alone")
	})

	t.Run("not writable, even for root", func(t *testing.T) {
		// /proc is a directory in which nobody can create a file.
		fi, err := os.Stat("/proc")
		if err != nil || !fi.IsDir() {
			t.Skip("no /proc here")
		}
		refused(t, "/proc", "is not writable", "make it writable")
	})

	t.Run("read-only permissions", func(t *testing.T) {
		if os.Geteuid() == 0 {
			t.Skip("running as root: permission bits do not stop root's writes (the /proc case covers an unwritable root)")
		}
		root := t.TempDir()
		require.NoError(t, os.Chmod(root, 0o555))
		t.Cleanup(func() { os.Chmod(root, 0o755) })
		refused(t, root, "is not writable", "permission denied")
	})

	t.Run("ingest on another filesystem", func(t *testing.T) {
		// An ingest directory that leads to another filesystem: commits
		// (a rename from ingest/ into blobs/) would fail with EXDEV.
		root := t.TempDir()
		require.NoError(t, os.Symlink("/proc", filepath.Join(root, "ingest")))
		refused(t, root, "spans filesystems", filepath.Join(root, "ingest")+" is on another one")
	})

	t.Run("missing root is created", func(t *testing.T) {
		root := filepath.Join(t.TempDir(), "a", "b", "content")
		_, cs, err := newStore(t, root)
		require.NoError(t, err)
		fi, err := os.Stat(root)
		require.NoError(t, err)
		require.True(t, fi.IsDir())
		leftovers, err := filepath.Glob(filepath.Join(root, ".rootcheck-*"))
		require.NoError(t, err)
		require.Empty(t, leftovers, "the check leaves nothing behind")
		_, err = cs.Info(ctx, digest.FromString("absent"))
		require.ErrorIs(t, err, errdefs.ErrNotFound, "the store serves")
	})
}
