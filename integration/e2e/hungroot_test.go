package e2e

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sharedcontent/sharedcontent/internal/testutil/freezefs"
	"github.com/sharedcontent/sharedcontent/internal/testutil/registry"
)

// hungStorageTimeout is n1's --storage-timeout in TestFaultHungRoot.
const hungStorageTimeout = 2 * time.Second

// TestFaultHungRoot: the shared filesystem stops answering on one node.
// n1's --root is a FUSE passthrough of the shared directory that the test
// freezes (every syscall on it blocks, as on an NFS hard mount whose server
// is gone); n2 uses the directory itself. While frozen, n1's containerd
// does not hang on the plugin: a read fails within the storage timeout,
// the removal of an image only n1 used deletes nothing (containerd's
// collection fails its content walk, as unavailable), and a pull waits
// (containerd retries an unavailable writer) while n2 pulls and reads as
// usual. After the thaw n1's pull completes by itself, every blob either
// node's containerd lists reads back, and a re-pull works.
func TestFaultHungRoot(t *testing.T) {
	needSharedcontent(t)
	e := newEnv(t)
	reg, err := registry.Start()
	require.NoError(t, err)
	t.Cleanup(func() { reg.Close() })
	shared := e.path("shared")
	require.NoError(t, os.MkdirAll(shared, 0o755))
	fs := freezefs.Mount(t, shared)
	ls := e.startLockServer("--session-ttl", faultSessionTTL.String(), "--lease-ttl", faultLeaseTTL.String())
	n1 := e.startSharedNode("n1", fs.Dir, ls.url(), "--storage-timeout", hungStorageTimeout.String())
	n2 := e.startSharedNode("n2", shared, ls.url())
	t.Cleanup(fs.Thaw) // before the nodes stop

	img := pushImage(t, reg, "e2e/hung", faultLayer, faultLayer)
	solo := pushImage(t, reg, "e2e/hung-solo", faultLayer)
	fresh := pushImage(t, reg, "e2e/hung-fresh", faultLayer)
	require.NoError(t, n1.pull(img.Ref, pullTimeout))
	require.NoError(t, n2.pull(img.Ref, pullTimeout))
	require.NoError(t, n1.pull(solo.Ref, pullTimeout))

	fs.Freeze()
	frozen := time.Now()
	start := time.Now()
	_, _, err = n1.contentDigest(img.Layers[0].Digest.String())
	took := time.Since(start)
	require.Error(t, err, "n1 read a blob through a frozen root")
	require.Contains(t, err.Error(), "not answering within "+hungStorageTimeout.String())
	require.GreaterOrEqual(t, took, hungStorageTimeout)
	require.Less(t, took, 10*hungStorageTimeout, "ctr content get on n1 answered too late (ctr's own 60 s timeout: the old code hung until it)")

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pulling := pullAsync(ctx, n1, fresh.Ref, pullTimeout)
	require.NoError(t, n2.pull(fresh.Ref, pullTimeout), "n2 pulls while n1's root is frozen")
	requireReadable(t, img, []*node{n2})
	start = time.Now()
	rmErr := n1.removeImage(solo.Ref)
	removal := time.Since(start)
	c := &cluster{e: e, reg: reg, shared: shared, ls: ls}
	c.requireSharedBlobs(t, solo)
	// n1's pull meets the frozen root: containerd retries a writer that is
	// answered unavailable, so it may wait out the freeze; a look-up
	// (Info) answered unavailable fails it instead, with the root's
	// error. Either way it never hangs and never writes elsewhere.
	var early *pullResult
	select {
	case r := <-pulling:
		require.Error(t, r.err, "n1's pull succeeded while its root was frozen")
		require.Contains(t, r.err.Error(), "not answering within "+hungStorageTimeout.String(), "n1's pull failed, not for its root")
		early = &r
	default:
	}
	require.Positive(t, fs.Blocked(), "all of this ran while n1's root was frozen")
	fs.Thaw()
	thawed := time.Now()

	outcome := "finished"
	if early == nil {
		r := <-pulling
		if r.err != nil {
			require.Contains(t, r.err.Error(), "not answering within "+hungStorageTimeout.String(), "n1's pull failed, not for its root")
			early = &r
		}
	}
	if early != nil {
		outcome = "failed with the root's error; pulled again"
		require.NoError(t, n1.pull(fresh.Ref, pullTimeout), "n1 pulls again after the thaw")
	}
	resumed := time.Since(thawed)
	reads := 0
	for _, n := range []*node{n1, n2} {
		ds, err := n.contentList()
		require.NoError(t, err)
		for _, d := range ds {
			got, _, err := n.contentDigest(d)
			require.NoError(t, err, "%s: content get %s", n.id, short(d))
			require.Equal(t, d, got)
			reads++
		}
	}
	require.NoError(t, n1.pull(solo.Ref, pullTimeout), "n1 pulls the removed image again")
	reads += requireReadable(t, solo, []*node{n1})
	report(t, "hung root: n1's root frozen %.1fs (--storage-timeout %v); ctr content get on n1 failed after %.2fs; image removal on n1 deleted nothing (%.2fs, %v); n2 pulled and read meanwhile; n1's pull %s, done %.2fs after the thaw; %d blobs listed by n1,n2 read back; re-pull ok",
		thawed.Sub(frozen).Seconds(), hungStorageTimeout, took.Seconds(), removal.Seconds(), rmErr, outcome, resumed.Seconds(), reads)
}
