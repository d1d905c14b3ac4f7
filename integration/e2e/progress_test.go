package e2e

import (
	"context"
	"encoding/json"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sharedcontent/sharedcontent/internal/testutil/logbuf"
	"github.com/sharedcontent/sharedcontent/internal/testutil/registry"
)

// The progress test's figures: a layer that stays mid-download over a
// slow uplink until the follower's ctr pull has drawn it moving, then
// finishes over a fast one.
const (
	progressLayerSize = 24 << 20 // under 100 MiB: ctr's column cuts "123.4 MiB"
	progressSlow      = 2 << 20
	progressFast      = 256 << 20
)

// TestFollowerProgress (docs/design.md §5.10): two nodes pull one image;
// node A downloads the layer, node B waits for it as a follower. B's
// `ctr images pull` draws the layer's bytes moving (the holder's progress,
// read by B's store) at least twice before the layer completes, and
// `sharedcontentctl top --once` names A as the layer's holder and B as
// its waiter, with A's bytes. Both pulls complete with one GET of the
// layer, and the image is ready and readable on both.
func TestFollowerProgress(t *testing.T) {
	twoNodes := func(e *env, _ int) ([]string, string) { return localRoots(e, 2) }
	c := newClusterOn(t, twoNodes, "", registry.WithBandwidth(progressSlow))
	img := pushImage(t, c.reg, "e2e/progress", progressLayerSize)
	layer := img.Layers[0].Digest.String()
	a, b := c.nodes[0], c.nodes[1]
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	pullA := pullAsync(ctx, a, img.Ref, pullTimeout)
	waitFor(t, "node A holding the layer's pull lock", time.Minute, func() (bool, error) {
		st, err := c.ls.status("pull", layer)
		return err == nil && st.Holder != nil && st.Holder.NodeID == a.id, err
	})
	var bOut logbuf.Buffer
	pullB := make(chan error, 1)
	go func() { pullB <- b.ctrTo(ctx, &bOut, &bOut, pullTimeout, "images", "pull", "--plain-http", img.Ref) }()
	waitFor(t, "node B waiting behind A", time.Minute, func() (bool, error) {
		st, err := c.ls.status("pull", layer)
		return err == nil && st.Holder != nil && st.Holder.NodeID == a.id && len(st.Queue) == 1 && st.Queue[0].NodeID == b.id, err
	})

	out, err := ctl(t, "--coordinator", c.ls.url(), "--root", c.shared, "-o", "json", "top", "--once")
	require.NoError(t, err, out)
	var top struct {
		Downloads []topDownload `json:"downloads"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &top), out)
	i := slices.IndexFunc(top.Downloads, func(d topDownload) bool { return d.Blob == layer })
	require.GreaterOrEqual(t, i, 0, "top lists the layer: %s", out)
	require.Equal(t, a.id, top.Downloads[i].Holder, "top: the layer's holder")
	require.Equal(t, []string{b.id}, top.Downloads[i].WaiterNodes, "top: the layer's waiter")
	require.NotNil(t, top.Downloads[i].Bytes, "top: A's bytes, from its ingest in the root")

	var moving []int64
	waitFor(t, "B's ctr pull drawing the layer's bytes moving", time.Minute, func() (bool, error) {
		moving = layerProgress(bOut.String(), layer, progressLayerSize)
		return len(moving) >= 2, nil
	})
	require.Less(t, moving[len(moving)-1], int64(progressLayerSize))
	require.False(t, sharedHas(c.shared, layer), "the layer is not complete yet")
	t.Logf("B's ctr pull drew the layer at %v bytes before it completed", moving)

	c.reg.SetBandwidth(progressFast)
	require.NoError(t, (<-pullA).err, "A's pull")
	require.NoError(t, <-pullB, "B's pull")
	per, _ := getsOf(c.reg, []string{layer})
	require.Equal(t, 1, per[layer], "GETs of the layer: A's only")
	nodes := []*node{a, b}
	requireReady(t, img, nodes)
	requireReadable(t, img, nodes)
}

// topDownload is a row of `sharedcontentctl top -o json`.
type topDownload struct {
	Blob        string   `json:"blob"`
	Holder      string   `json:"holder"`
	WaiterNodes []string `json:"waiter_nodes"`
	Bytes       *int64   `json:"bytes"`
}

// progressUnits are the units of ctr's byte counts, cut to 8 characters
// ("512.0 KiB" shows as "512.0 Ki").
var progressUnits = map[string]float64{"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}

// layerProgress returns the bytes ctr's progress drew for layer, below
// total, each larger than the one before: the layer moving.
func layerProgress(out, layer string, total int64) []int64 {
	hex := strings.TrimPrefix(layer, "sha256:")[:12]
	re := regexp.MustCompile(`layer \(` + hex + `\)\s+downloading\s.*?\s([0-9.]+) ([KMG]?)i?B?/`)
	var seen []int64
	for _, m := range re.FindAllStringSubmatch(out, -1) {
		f, err := strconv.ParseFloat(m[1], 64)
		if err != nil {
			continue
		}
		n := int64(f * progressUnits[m[2]])
		if n > 0 && n < total && (len(seen) == 0 || n > seen[len(seen)-1]) {
			seen = append(seen, n)
		}
	}
	return seen
}
