package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sharedcontent/sharedcontent/internal/testutil/registry"
)

// The follower hand-off's figures: a layer that is mid-download for a
// few seconds over a throttled uplink.
const (
	handOffLayerSize = 64 << 20
	handOffBandwidth = 16 << 20
)

// TestFollowerHandOff: three nodes pull one image; while the holder of the
// layer's pull lock downloads it, the two other nodes wait as followers
// (queued on the coordinator, not retrying). The holder's containerd is
// killed: its Write stream ends, the plugin releases the lock as failed at
// once (no lease to wait out), one follower becomes the holder and
// downloads the layer (one extra GET), and the other follower shares it.
// Both pulls complete, and the image is complete, unpacked and readable on
// both.
func TestFollowerHandOff(t *testing.T) {
	c := newCluster(t, registry.WithBandwidth(handOffBandwidth))
	img := pushImage(t, c.reg, "e2e/handoff", handOffLayerSize)
	layer := img.Layers[0].Digest.String()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	pulls := startPulls(ctx, c, img.Ref)
	holder, followers := layerHolder(t, c, layer, 2, handOffLayerSize/5)
	sent := c.reg.BlobBytes()

	holder.containerd.kill()
	killed := time.Now()
	<-pulls[holder.id] // its ctr loses the daemon

	// The lock is handed over when the holder's stream ends, not when its
	// lease expires: the layer is committed within the download's time.
	download := time.Duration(float64(handOffLayerSize) / float64(handOffBandwidth) * float64(time.Second))
	bound := download + commitSlack
	committed, done := awaitSuccessor(t, c, layer, killed, bound, bound+leaseTTL+time.Minute, pulls, followers)
	assert.Less(t, committed, bound, "layer committed %v after the kill; bound: download %v + %v (a lease expiry would add %v)",
		committed, download, commitSlack, leaseTTL)
	requireReady(t, img, followers)
	reads := requireReadable(t, img, followers)
	per, _ := getsOf(c.reg, []string{layer})
	assert.Equal(t, 2, per[layer], "GETs of the layer: the killed holder's and one follower's")
	refs, err := c.ls.refs(layer)
	require.NoError(t, err)
	assert.Equal(t, sorted(nodeIDs(followers)), refs, "references of the layer: both followers, not the dead holder")
	st, err := c.ls.status("pull", layer)
	require.NoError(t, err)
	takenBy := "?"
	if st.Completed != nil {
		takenBy = st.Completed.NodeID
	}
	report(t, "follower hand-off: %s held the %.0f MB layer, its containerd killed -9 at %.1f MB; %s took over and committed it %.1fs after the kill (bound %.1fs, no lease expiry); pulls done after the kill: %s; complete and unpacked on both, %d/%d blob reads ok; layer GETs %d",
		holder.id, mb(handOffLayerSize), mb(sent), takenBy, committed.Seconds(), bound.Seconds(), strings.Join(done, ", "), reads, reads, per[layer])
}
