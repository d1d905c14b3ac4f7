package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sharedcontent/sharedcontent/internal/testutil/registry"
	"github.com/sharedcontent/sharedcontent/lockserver/api"
)

// The prefetch scenario's figures: layers that take about a second over
// the throttled uplink, so that a prefetch and a node's pull overlap.
const (
	prefetchLayerSize = 6 << 20
	prefetchBandwidth = 8 << 20
	prefetchNodeID    = "prefetch-e2e"
)

// TestPrefetch (docs/design.md §5.9): `sharedcontentctl prefetch` puts an
// image into the shared root through a real coordinator, downloading each
// blob once; a real containerd node's `ctr images pull` of it afterwards
// takes no byte from the registry and unpacks it. A prefetch that starts
// while a node downloads a layer waits for it, and a node that pulls
// while the prefetch downloads a layer waits for it: one GET per blob
// either way. The prefetch's node is forgotten when it ends.
func TestPrefetch(t *testing.T) {
	needCtl(t)
	e := newEnv(t)
	reg, err := registry.Start(registry.WithBandwidth(prefetchBandwidth))
	require.NoError(t, err)
	t.Cleanup(func() { reg.Close() })
	ls := e.startLockServer()
	shared := e.path("shared")
	nodes := e.startSharedNodes([]string{shared, shared}, ls.url())
	prefetch := func(ref string) (string, error) {
		return ctl(t, "--coordinator", ls.url(), "--root", shared, "prefetch", ref,
			"--no-pin", "--hosts-dir", e.path("certs.d"), "--node-id", prefetchNodeID)
	}
	prefetchAsync := func(ref string) <-chan error {
		done := make(chan error, 1)
		go func() {
			out, err := prefetch(ref)
			if err == nil && !strings.Contains(out, "prefetched "+ref) {
				err = fmt.Errorf("no summary in %q", out)
			}
			done <- err
		}()
		return done
	}
	// holding waits until who holds layer's pull lock with bytes of it sent.
	holding := func(layer, who string) {
		t.Helper()
		waitFor(t, who+" downloading "+short(layer), time.Minute, func() (bool, error) {
			st, err := ls.status("pull", layer)
			if err != nil || st.Holder == nil {
				return false, err
			}
			return st.Holder.NodeID == who && reg.BlobBytes() > 0, nil
		})
	}
	imgs := []testImage{
		pushImage(t, reg, "e2e/prefetch-a", prefetchLayerSize, prefetchLayerSize/2),
		pushImage(t, reg, "e2e/prefetch-b", prefetchLayerSize, prefetchLayerSize/2),
		pushImage(t, reg, "e2e/prefetch-c", prefetchLayerSize, prefetchLayerSize/2),
	}

	// 1. Prefetch, then a node pulls.
	a := imgs[0]
	reg.ResetCounters()
	start := time.Now()
	out, err := prefetch(a.Ref)
	require.NoError(t, err, out)
	took := time.Since(start)
	requireSingleDownload(t, reg, a)
	prefetched := reg.BlobBytes()
	require.Contains(t, out, "prefetched "+a.Ref)
	reg.ResetCounters()
	start = time.Now()
	require.NoError(t, nodes[0].pull(a.Ref, 2*time.Minute))
	pullTook := time.Since(start)
	per, gets := getsOf(reg, a.all())
	require.Zero(t, reg.BlobBytes(), "the node's pull read no blob bytes from the registry; GETs %v", per)
	require.Zero(t, gets)
	requireReady(t, a, nodes[:1])
	requireReadable(t, a, nodes[:1])

	// 2. A node downloads a layer; a prefetch starts and waits for it.
	b := imgs[1]
	layer := b.Layers[0].Digest.String()
	reg.ResetCounters()
	pulled := pullAsync(t.Context(), nodes[1], b.Ref, 2*time.Minute)
	holding(layer, nodes[1].id)
	out, err = prefetch(b.Ref)
	require.NoError(t, err, out)
	require.NoError(t, (<-pulled).err)
	requireSingleDownload(t, reg, b)
	require.Regexp(t, "(?m)^"+layer+" .*: present, referenced$", out, "the prefetch waited for the node's download and downloaded nothing of it")
	requireReady(t, b, nodes[1:])
	requireReadable(t, b, nodes[1:])

	// 3. A prefetch downloads a layer; a node pulls and waits for it.
	c := imgs[2]
	layer = c.Layers[0].Digest.String()
	reg.ResetCounters()
	fetched := prefetchAsync(c.Ref)
	holding(layer, prefetchNodeID)
	require.NoError(t, nodes[1].pull(c.Ref, 2*time.Minute))
	require.NoError(t, <-fetched)
	total := requireSingleDownload(t, reg, c)
	requireReady(t, c, nodes[1:])
	requireReadable(t, c, nodes[1:])

	var members api.NodesResponse
	require.NoError(t, ls.get("/nodes", &members))
	for _, m := range members.Nodes {
		require.NotEqual(t, prefetchNodeID, m.NodeID, "the prefetch's node is forgotten")
	}
	report(t, "prefetch: %.1f MB image prefetched in %.1fs (%.1f MB from the registry); a node's ctr pull after it: %.1fs, 0 registry bytes; a prefetch started during a node's layer download found it present; a node's pull started during the prefetch's: %d GETs for %d blobs",
		mb(a.size()), took.Seconds(), mb(prefetched), pullTook.Seconds(), total, len(c.all()))
}

// TestPrefetchThenCRIPull (docs/design.md §5.9: a node's ctr pull or CRI
// pull of a prefetched image downloads 0 layer bytes): after
// `sharedcontentctl prefetch`, kubelet's pull of the image through CRI
// (`crictl pull`) on a real containerd-cri node takes no blob byte and
// no blob GET from the registry, with either of CRI's pull paths (the
// transfer service on n1, containerd's local pull on n2); CRI lists the
// image and every blob its namespace records reads back.
func TestPrefetchThenCRIPull(t *testing.T) {
	needCtl(t)
	buildCRI(t)
	e := newEnv(t)
	reg, err := registry.Start()
	require.NoError(t, err)
	t.Cleanup(func() { reg.Close() })
	ls := e.startLockServer()
	shared := e.path("shared")
	nodes := []*node{
		e.startCRINode("n1", shared, ls.url(), reg, false),
		e.startCRINode("n2", shared, ls.url(), reg, true),
	}
	img := pushImage(t, reg, "e2e/prefetch-cri", 2<<20, 1<<20)

	out, err := ctl(t, "--coordinator", ls.url(), "--root", shared, "prefetch", img.Ref,
		"--no-pin", "--hosts-dir", e.path("certs.d"), "--node-id", prefetchNodeID)
	require.NoError(t, err, out)
	require.Contains(t, out, "prefetched "+img.Ref)
	requireSingleDownload(t, reg, img)
	prefetched := reg.BlobBytes()
	require.Positive(t, prefetched)

	reads := 0
	for _, n := range nodes {
		reg.ResetCounters()
		require.NoError(t, n.criPull(img.Ref))
		per, gets := getsOf(reg, img.blobs())
		require.Zero(t, reg.BlobBytes(), "%s: crictl pull after the prefetch read blob bytes from the registry; GETs %v", n.id, per)
		require.Zero(t, gets, "%s: blob GETs after the prefetch: %v", n.id, per)
		tags, err := n.criImages()
		require.NoError(t, err)
		require.Contains(t, tags, img.Ref, "%s: crictl images", n.id)
		reads += requireCRIBlobsReadable(t, n)
	}
	report(t, "prefetch then CRI: %.1f MB prefetched (%.1f MB from the registry); crictl pull on 2 nodes (transfer service, local pull): 0 registry blob bytes, 0 blob GETs; listed by CRI on 2/2; %d blobs read back",
		mb(img.size()), mb(prefetched), reads)
}
