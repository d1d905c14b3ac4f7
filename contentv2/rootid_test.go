package contentv2

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/containerd/containerd/v2/core/content"
	"github.com/containerd/errdefs"
	"github.com/opencontainers/go-digest"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
)

// joinedStateDir returns the state dir of a node that joined a cluster on
// a root of its own (both returned), and the cluster.
func joinedStateDir(t *testing.T, c *fakeCluster) (stateDir, root string) {
	t.Helper()
	stateDir, root = t.TempDir(), t.TempDir()
	s := fakeStore(t, c, root, "node-1", WithStateDir(stateDir))
	s.kick <- struct{}{}
	require.Eventually(t, func() bool { _, err := os.Stat(rootRecordPath(stateDir)); return err == nil },
		10*time.Second, 5*time.Millisecond, "a node that joined records its root")
	require.NoError(t, s.Close())
	return stateDir, root
}

// TestRootRefusedAtStart: a node that joined refuses, before writing
// anything, a root that is missing, empty, or another root; with its own
// root it starts. Before, it created a missing root and claimed an empty
// one.
func TestRootRefusedAtStart(t *testing.T) {
	c := newFakeCluster(longTTL)
	stateDir, root := joinedStateDir(t, c)
	rec, err := readRootRecord(stateDir)
	require.NoError(t, err)
	require.Equal(t, "fake-cluster", rec.ClusterID)

	open := func(root string) error {
		cs, err := NewStore(root, "node-1", c.node("node-1"), WithStateDir(stateDir), WithSessionTTL(longTTL))
		if err == nil {
			cs.Close()
		}
		return err
	}
	empty := t.TempDir()
	err = open(empty)
	require.ErrorIs(t, err, ErrRootUnverified)
	require.True(t, errdefs.IsFailedPrecondition(err), "%v", err)
	require.ErrorContains(t, err, "shared root "+empty+" has no .sharedcontent/cluster.json")
	require.ErrorContains(t, err, "mount the shared storage at "+empty)
	ents, err := os.ReadDir(empty)
	require.NoError(t, err)
	require.Empty(t, ents, "nothing written into the empty root")

	missing := filepath.Join(t.TempDir(), "mnt")
	err = open(missing)
	require.ErrorIs(t, err, ErrRootUnverified)
	require.ErrorContains(t, err, "does not exist")
	require.NoDirExists(t, missing, "a missing root is not created")

	// Another root of the same cluster ID (restored elsewhere, say) is
	// still another root.
	other := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(other, MetaDir), 0o755))
	require.NoError(t, os.WriteFile(clusterFilePath(other), []byte(`{"cluster_id":"`+rec.ClusterID+`","created_at":"2020-01-01T00:00:00Z"}`), 0o644))
	err = open(other)
	require.ErrorIs(t, err, ErrRootUnverified)
	require.ErrorContains(t, err, "is another root")

	// A node that joined before roots were recorded: its journal's
	// membership alone refuses an empty root.
	require.NoError(t, os.Remove(rootRecordPath(stateDir)))
	require.ErrorIs(t, open(empty), ErrRootUnverified)
	require.NoError(t, open(root))
	_, err = readRootRecord(stateDir)
	require.NoError(t, err)
}

// TestRootUnreadyWhileRunning: a running node whose root loses its
// identity turns unready: writes and deletes are refused as unavailable,
// naming the root, the marker is not refreshed, and the change is counted
// once; with the identity back it resumes by itself.
func TestRootUnreadyWhileRunning(t *testing.T) {
	c := newFakeCluster(longTTL)
	root := t.TempDir()
	s := fakeStore(t, c, root, "node-1")
	s.kick <- struct{}{}
	require.Eventually(t, func() bool { id, _ := s.rootw.expected(); return id.known() }, 10*time.Second, 5*time.Millisecond)
	ctx := context.Background()
	require.NoError(t, s.rootw.check(ctx))

	require.NoError(t, os.Rename(clusterFilePath(root), clusterFilePath(root)+".away"))
	err := s.rootw.check(ctx)
	require.ErrorIs(t, err, ErrRootUnverified)
	require.True(t, errdefs.IsUnavailable(err), "%v", err)
	require.ErrorContains(t, err, "shared root "+root+" no longer has .sharedcontent/cluster.json")
	require.Equal(t, 0.0, testutil.ToFloat64(s.metrics.rootReady))

	_, desc := testBlob("unready ")
	_, err = s.Writer(ctx, content.WithRef("layer-"+desc.Digest.String()), content.WithDescriptor(desc))
	require.True(t, errdefs.IsUnavailable(err), "%v", err)
	require.ErrorIs(t, s.Delete(ctx, desc.Digest), ErrRootUnverified)
	_, err = s.Reap(ctx)
	require.ErrorIs(t, err, ErrRootUnverified)
	require.Equal(t, 1.0, testutil.ToFloat64(s.metrics.rootUnready.WithLabelValues(rootNoIdentity)), "counted once")

	require.NoError(t, os.Rename(clusterFilePath(root)+".away", clusterFilePath(root)))
	require.NoError(t, s.rootw.check(ctx))
	require.NoError(t, s.Ready())
	require.Equal(t, 1.0, testutil.ToFloat64(s.metrics.rootReady))
}

// TestRootProbeBounded: a probe that does not answer (a hung filesystem)
// makes the root unready (hung) within the probe timeout instead of
// blocking the caller, no second probe starts while it hangs, and the
// root is ready again once it answers.
func TestRootProbeBounded(t *testing.T) {
	c := newFakeCluster(longTTL)
	s := fakeStore(t, c, t.TempDir(), "node-1", WithRootProbe(50*time.Millisecond))
	release := make(chan struct{})
	probes := make(chan struct{}, 10)
	s.rootw.mu.Lock()
	s.rootw.probeFn = func(string, rootIdentity, bool) error {
		probes <- struct{}{}
		<-release
		return nil
	}
	s.rootw.mu.Unlock()
	ctx := context.Background()
	start := time.Now()
	err := s.rootw.check(ctx)
	took := time.Since(start)
	require.ErrorIs(t, err, ErrRootUnverified)
	require.Equal(t, rootHung, reasonOf(err))
	require.GreaterOrEqual(t, took, 50*time.Millisecond)
	require.ErrorIs(t, s.Delete(ctx, digest.FromString("hung")), ErrRootUnverified)
	require.Len(t, probes, 1, "no second probe while one hangs")
	close(release)
	require.Eventually(t, func() bool { return s.Ready() == nil }, 10*time.Second, time.Millisecond, "ready once the probe answers")
}

// TestRootUnreadyReasonsExported: every reason of
// sharedcontent_root_unready_total is exported at 0 from the start, so
// an alert on its increase sees the first time a root turns unready.
func TestRootUnreadyReasonsExported(t *testing.T) {
	s := fakeStore(t, newFakeCluster(longTTL), t.TempDir(), "node-1")
	require.Equal(t, len(rootReasons), testutil.CollectAndCount(s.metrics.rootUnready))
	for _, r := range rootReasons {
		require.Zero(t, testutil.ToFloat64(s.metrics.rootUnready.WithLabelValues(r)), r)
	}
	require.Equal(t, 1.0, testutil.ToFloat64(s.metrics.rootReady))
}
