package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sharedcontent/sharedcontent/integration/registry"
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

	pulls := map[string]<-chan pullResult{}
	for _, n := range c.nodes {
		pulls[n.id] = pullAsync(ctx, n, img.Ref, pullTimeout)
	}
	var holderID string
	waitFor(t, "a holder of the layer and two followers queued behind it", time.Minute, func() (bool, error) {
		st, err := c.ls.status("pull", layer)
		if err != nil || st.Holder == nil {
			return false, err
		}
		holderID = st.Holder.NodeID
		return len(st.Queue) == 2, nil
	})
	waitFor(t, "the layer in flight", time.Minute, func() (bool, error) {
		return c.reg.BlobBytes() >= handOffLayerSize/5, nil
	})
	var holder *node
	var followers []*node
	for _, n := range c.nodes {
		if n.id == holderID {
			holder = n
		} else {
			followers = append(followers, n)
		}
	}
	require.NotNil(t, holder, "holder %q is not a node", holderID)
	sent := c.reg.BlobBytes()

	holder.containerd.kill()
	killed := time.Now()
	<-pulls[holder.id] // its ctr loses the daemon

	// The lock is handed over when the holder's stream ends, not when its
	// lease expires: the layer is committed within the download's time.
	download := time.Duration(float64(handOffLayerSize) / float64(handOffBandwidth) * float64(time.Second))
	bound := download + commitSlack
	blobPath := filepath.Join(c.shared, "blobs", "sha256", strings.TrimPrefix(layer, "sha256:"))
	waitFor(t, "the layer committed by a follower", bound+leaseTTL+time.Minute, func() (bool, error) {
		_, err := os.Stat(blobPath)
		return err == nil, nil
	})
	committed := time.Since(killed)
	assert.Less(t, committed, bound, "layer committed %v after the kill; bound: download %v + %v (a lease expiry would add %v)",
		committed, download, commitSlack, leaseTTL)
	var done []string
	for _, n := range followers {
		select {
		case r := <-pulls[n.id]:
			require.NoError(t, r.err, "pull on %s after the holder's containerd died", n.id)
			done = append(done, fmt.Sprintf("%s %.1fs", n.id, r.end.Sub(killed).Seconds()))
		case <-time.After(bound + unpackAllowance):
			t.Fatalf("pull on %s still running %v after the holder's containerd died", n.id, time.Since(killed))
		}
	}
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
