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
// digest, held by the pin alone. A second image is pinned by `prefetch`
// (docs/design.md §5.9), which downloads it and pins what it fetched: the
// nodes pull it from the root, remove it and collect, and it survives the
// same way. After `pin rm`, the reaper reclaims them.
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

	// The second image: prefetched and pinned, then pulled by the nodes.
	pre := pushImage(t, c.reg, "e2e/prefetched", faultLayer, faultLayer)
	out, err = ctl(t, "--coordinator", c.ls.url(), "--root", c.shared, "prefetch", pre.Ref,
		"--pin-name", "pre", "--hosts-dir", t.TempDir(), "--node-id", "prefetch-e2e")
	require.NoError(t, err, "sharedcontentctl prefetch: %s", out)
	require.Contains(t, out, `pinned as "pre"`)
	for _, r := range pullAll(c.nodes, pre.Ref, pullTimeout) {
		require.NoError(t, r.err, "pull of the prefetched image on %s", r.node.id)
	}

	// Every node removes the images and collects; the reaper runs.
	start := time.Now()
	for _, n := range c.nodes {
		require.NoError(t, n.removeImage(img.Ref), "remove the image on %s", n.id)
		require.NoError(t, n.removeImage(pre.Ref), "remove the prefetched image on %s", n.id)
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
	for _, d := range pre.all() {
		require.NoError(t, readShared(c.shared, d), "prefetched and pinned blob %s after every node's GC and 3 reaper passes", short(d))
		got, err := c.ls.refs(d)
		require.NoError(t, err)
		require.Equal(t, []string{"pin/pre"}, got, "references of %s: the prefetch's pin's alone", short(d))
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
	require.Len(t, rows, 2)
	if rows[0].Name != "web" {
		rows[0], rows[1] = rows[1], rows[0]
	}
	require.Equal(t, "web", rows[0].Name)
	require.Equal(t, "pre", rows[1].Name)
	require.ElementsMatch(t, pre.all(), rows[1].ResourceIDs)
	require.ElementsMatch(t, img.all(), rows[0].ResourceIDs)
	require.NotNil(t, rows[0].Bytes)
	require.Greater(t, *rows[0].Bytes, int64(2*faultLayer))

	// The pin goes: so do its blobs.
	for _, name := range []string{"web", "pre"} {
		out, err = ctl(t, "--coordinator", c.ls.url(), "pin", "rm", name)
		require.NoError(t, err, "sharedcontentctl pin rm %s: %s", name, out)
	}
	dropped := time.Now()
	waitFor(t, "the unpinned blobs reclaimed", reclaimTimeout, func() (bool, error) {
		all := append(img.all(), pre.all()...)
		if left := sharedCount(c.shared, all); left > 0 {
			return false, fmt.Errorf("%d of %d blobs left", left, len(all))
		}
		return true, nil
	})
	requireGone(t, c.shared, img)
	requireGone(t, c.shared, pre)
	report(t, "pins: 2 nodes pulled a %d-blob image, `pin add` of its manifest, and a %d-blob image `prefetch` pinned; both removed them and ran GC, 3 reaper passes (%.1fs): %d+%d pinned blobs still read back from the shared root, held by the pins alone; nodes' listed blobs readable: %d; `pin rm` → reaper reclaimed all in %.2fs (interval %v, grace %v)",
		len(img.all()), len(pre.all()), held.Seconds(), len(img.all()), len(pre.all()), listed, time.Since(dropped).Seconds(), reapInterval, reapGrace)
}
