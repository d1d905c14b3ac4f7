package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"
	"github.com/stretchr/testify/require"
)

// readShared reads dgst's file in the shared blobs/ and reports whether
// its content has that digest.
func readShared(shared, dgst string) error {
	f, err := os.Open(filepath.Join(shared, "blobs", "sha256", strings.TrimPrefix(dgst, "sha256:")))
	if err != nil {
		return err
	}
	defer f.Close()
	got, err := digest.FromReader(f)
	if err != nil {
		return err
	}
	if got.String() != dgst {
		return fmt.Errorf("%s reads back as %s", short(dgst), short(got.String()))
	}
	return nil
}

// TestPinSurvivesGCAndReaper (docs/design.md §8.21): 2 real containerd
// nodes pull an image; an operator pins its manifest digest
// (sharedcontentctl pin add, reading the image from the shared root);
// every node removes the image and runs GC, and the reaper runs passes:
// every pinned blob is still in the shared root and reads back to its
// digest, held by the pin alone. After `pin rm`, the reaper reclaims them.
func TestPinSurvivesGCAndReaper(t *testing.T) {
	needCtl(t)
	c := newFaultCluster(t, faultOpts{
		nodes:          2,
		lockServerArgs: []string{"--reap-grace", reapGrace.String()},
		pluginArgs: func(int) []string {
			return []string{"--reap-interval", reapInterval.String(), "--reap-grace", reapGrace.String()}
		},
	})
	img := pushImage(t, c.reg, "e2e/pinned", faultLayer, faultLayer)
	for _, r := range pullAll(c.nodes, img.Ref, pullTimeout) {
		require.NoError(t, r.err, "pull on %s", r.node.id)
	}
	c.ls.waitSynced(t, nodeIDs(c.nodes), syncTimeout)
	c.requireRefs(t, img, c.nodes)

	manifest := img.Manifest.Digest.String()
	out, err := ctl(t, "--coordinator", c.ls.url(), "--root", c.shared, "pin", "add", manifest, "--name", "web")
	require.NoError(t, err, "sharedcontentctl pin add: %s", out)
	require.Contains(t, out, fmt.Sprintf("pinned web: %d blob(s)", len(img.all())))
	for _, d := range img.all() {
		got, err := c.ls.refs(d)
		require.NoError(t, err)
		require.Contains(t, got, "pin/web", "references of %s after pin add", short(d))
	}

	// Every node removes the image and collects; the reaper runs.
	start := time.Now()
	for _, n := range c.nodes {
		require.NoError(t, n.removeImage(img.Ref), "remove the image on %s", n.id)
	}
	before, err := reaperPasses(c.nodes)
	require.NoError(t, err)
	waitFor(t, "3 reaper passes after every node's GC", reclaimTimeout, func() (bool, error) {
		p, err := reaperPasses(c.nodes)
		return p >= before+3, err
	})
	held := time.Since(start)
	for _, d := range img.all() {
		require.NoError(t, readShared(c.shared, d), "pinned blob %s after every node's GC and 3 reaper passes", short(d))
		got, err := c.ls.refs(d)
		require.NoError(t, err)
		require.Equal(t, []string{"pin/web"}, got, "references of %s: the pin's alone", short(d))
	}
	listed := requireListedReadable(t, c.nodes)

	out, err = ctl(t, "--coordinator", c.ls.url(), "--root", c.shared, "-o", "json", "pin", "ls")
	require.NoError(t, err, "sharedcontentctl pin ls: %s", out)
	var rows []struct {
		Name        string   `json:"name"`
		ResourceIDs []string `json:"resource_ids"`
		Bytes       *int64   `json:"bytes"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &rows), out)
	require.Len(t, rows, 1)
	require.Equal(t, "web", rows[0].Name)
	require.ElementsMatch(t, img.all(), rows[0].ResourceIDs)
	require.NotNil(t, rows[0].Bytes)
	require.Greater(t, *rows[0].Bytes, int64(2*faultLayer))

	// The pin goes: so do its blobs.
	out, err = ctl(t, "--coordinator", c.ls.url(), "pin", "rm", "web")
	require.NoError(t, err, "sharedcontentctl pin rm: %s", out)
	dropped := time.Now()
	waitFor(t, "the unpinned blobs reclaimed", reclaimTimeout, func() (bool, error) {
		if left := sharedCount(c.shared, img.all()); left > 0 {
			return false, fmt.Errorf("%d of %d blobs left", left, len(img.all()))
		}
		return true, nil
	})
	requireGone(t, c.shared, img)
	report(t, "pins: 2 nodes pulled a %d-blob image, `pin add` of its manifest; both removed it and ran GC, 3 reaper passes (%.1fs): %d/%d pinned blobs still read back from the shared root, held by the pin alone; nodes' listed blobs readable: %d; `pin rm` → reaper reclaimed all %d in %.2fs (interval %v, grace %v)",
		len(img.all()), held.Seconds(), len(img.all()), len(img.all()), listed, len(img.all()), time.Since(dropped).Seconds(), reapInterval, reapGrace)
}
