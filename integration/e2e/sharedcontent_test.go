package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sharedcontent/sharedcontent/internal/testutil/registry"
)

// cluster is scenarios 1–5's setup: a registry, a sharedcontent-lockserver
// and three nodes (containerd-sharedcontent + containerd) sharing one
// content directory.
type cluster struct {
	e   *env
	reg *registry.Registry
	ls  *lockServer
	// shared is where the test itself looks at the shared directory.
	shared string
	nodes  []*node
	// tag prefixes the scenarios' summary lines ("" on local disk).
	tag string
}

// rootProvider gives each of n nodes its --root, and the path through
// which the test observes the shared directory.
type rootProvider func(e *env, n int) (roots []string, observe string)

// localRoots is one directory on the local disk, every node's root.
func localRoots(e *env, n int) ([]string, string) {
	shared := e.path("shared")
	roots := make([]string, n)
	for i := range roots {
		roots[i] = shared
	}
	return roots, shared
}

// newCluster is a cluster on the local disk.
func newCluster(t *testing.T, regOpts ...registry.Option) *cluster {
	t.Helper()
	return newClusterOn(t, localRoots, "", regOpts...)
}

// newClusterOn is a cluster whose nodes' roots come from roots; tag
// prefixes its summary lines.
func newClusterOn(t *testing.T, roots rootProvider, tag string, regOpts ...registry.Option) *cluster {
	t.Helper()
	needSharedcontent(t)
	e := newEnv(t)
	reg, err := registry.Start(regOpts...)
	require.NoError(t, err)
	t.Cleanup(func() { reg.Close() })
	nodeRoots, observe := roots(e, 3)
	c := &cluster{e: e, reg: reg, shared: observe, tag: tag}
	c.ls = e.startLockServer()
	c.nodes = e.startSharedNodes(nodeRoots, c.ls.url())
	return c
}

func nodeIDs(nodes []*node) []string {
	var out []string
	for _, n := range nodes {
		out = append(out, n.id)
	}
	return out
}

// requireRefs checks that the coordinator records exactly nodes as the
// references of every digest of img.
func (c *cluster) requireRefs(t *testing.T, img testImage, nodes []*node) {
	t.Helper()
	want := sorted(nodeIDs(nodes))
	for _, d := range img.all() {
		got, err := c.ls.refs(d)
		require.NoError(t, err)
		require.True(t, slices.Equal(want, got), "references of %s: want %v, got %v", short(d), want, got)
	}
}

// requireReady checks that img is complete and unpacked on every node.
func requireReady(t *testing.T, img testImage, nodes []*node) {
	t.Helper()
	for _, n := range nodes {
		ready, err := n.readyImages()
		require.NoError(t, err)
		require.Contains(t, ready, img.Ref, "%s: `ctr images check -q` (complete and unpacked); check says: %s", n.id, n.checkLine(img.Ref))
	}
}

// requireReadable checks that every blob of img reads back with its digest
// through `ctr content get` on every node, and returns the number of reads.
func requireReadable(t *testing.T, img testImage, nodes []*node) int {
	t.Helper()
	reads := 0
	for _, n := range nodes {
		for _, d := range img.all() {
			got, _, err := n.contentDigest(d)
			require.NoError(t, err)
			require.Equal(t, d, got, "%s: content get %s", n.id, short(d))
			reads++
		}
	}
	return reads
}

// requireSharedBlobs checks that every blob of img is in the shared blobs/.
func (c *cluster) requireSharedBlobs(t *testing.T, img testImage) {
	t.Helper()
	have, err := sharedFiles(c.shared, "blobs/sha256")
	require.NoError(t, err)
	for _, d := range img.all() {
		require.Contains(t, have, strings.TrimPrefix(d, "sha256:"), "shared blobs/ lost %s", short(d))
	}
}

// requireSingleDownload checks that the registry served each blob of img
// exactly once and the manifest by digest at most once (resolving the tag
// is not a download), and returns the total GETs.
func requireSingleDownload(t *testing.T, reg *registry.Registry, img testImage) int {
	t.Helper()
	per, total := getsOf(reg, img.all())
	for _, d := range img.blobs() {
		assert.Equal(t, 1, per[d], "GETs of blob %s", short(d))
	}
	assert.LessOrEqual(t, per[img.Manifest.Digest.String()], 1, "GETs of the manifest by digest")
	return total
}

// TestSharedContent runs scenarios 1–3 on one cluster, in order: each
// starts from the state the previous one left.
func TestSharedContent(t *testing.T) {
	runSharedContent(t, newCluster(t, registry.WithBandwidth(concurrentBandwidth)))
}

// TestCompiledIn runs scenarios 1–3 on three nodes whose containerd has
// sharedcontent compiled in (plugin/builtin; README "Compiled into
// containerd"), built by integration/tools/builtin at the main module's
// containerd version, with a stand-alone coordinator: the same guarantees
// without the proxy daemon.
func TestCompiledIn(t *testing.T) {
	needSharedcontent(t)
	buildBuiltin(t)
	e := newEnv(t)
	reg, err := registry.Start(registry.WithBandwidth(concurrentBandwidth))
	require.NoError(t, err)
	t.Cleanup(func() { reg.Close() })
	shared := e.path("shared")
	c := &cluster{e: e, reg: reg, shared: shared, tag: "compiled in: "}
	c.ls = e.startLockServer()
	for i := 1; i <= 3; i++ {
		c.nodes = append(c.nodes, e.startBuiltinNode(fmt.Sprintf("n%d", i), shared, c.ls.url()))
	}
	runSharedContent(t, c)
}

// runSharedContent is scenarios 1–3 on c (registry at concurrentBandwidth).
func runSharedContent(t *testing.T, c *cluster) {
	img := pushImage(t, c.reg, "e2e/shared", repeat(concurrentLayerSize, concurrentLayers)...)

	ok := t.Run("1-concurrent-pulls", func(t *testing.T) {
		start := time.Now()
		res := pullAll(c.nodes, img.Ref, pullTimeout)
		elapsed := time.Since(start)
		var times []string
		for _, r := range res {
			require.NoError(t, r.err, "pull on %s", r.node.id)
			times = append(times, fmt.Sprintf("%s %.2fs", r.node.id, r.elapsed.Seconds()))
		}
		gets := requireSingleDownload(t, c.reg, img)
		requireReady(t, img, c.nodes)
		c.requireSharedBlobs(t, img)
		c.requireRefs(t, img, c.nodes)
		report(t, "%s1 concurrent pulls, sharedcontent on 3 nodes: 3/3 ok in %.2fs (%s); %d GETs for %d blobs + manifest, %.1f MB; complete and unpacked on 3/3; references n1,n2,n3",
			c.tag, elapsed.Seconds(), strings.Join(times, ", "), gets, len(img.blobs()), mb(c.reg.BlobBytes()))
	})
	if !ok {
		t.Fatal("scenario 1 failed; 2 and 3 depend on it")
	}

	ok = t.Run("2-gc-on-one-node", func(t *testing.T) {
		n1 := c.nodes[0]
		start := time.Now()
		require.NoError(t, n1.removeImage(img.Ref))
		gc := time.Since(start)
		have, err := n1.contentList()
		require.NoError(t, err)
		for _, d := range img.all() {
			require.NotContains(t, have, d, "n1 still lists %s after rm --sync", short(d))
		}
		c.requireSharedBlobs(t, img)
		requireReady(t, img, c.nodes[1:])
		reads := requireReadable(t, img, c.nodes[1:])
		c.requireRefs(t, img, c.nodes[1:])
		_, gets := getsOf(c.reg, img.all())
		report(t, "%s2 GC on n1 (`images rm --sync`, %.2fs): all %d blobs kept in the shared dir; n2,n3 complete and unpacked, %d/%d blobs read back; references now n2,n3; registry GETs still %d, %.1f MB",
			c.tag, gc.Seconds(), len(img.all()), reads, reads, gets, mb(c.reg.BlobBytes()))
	})
	if !ok {
		t.Fatal("scenario 2 failed; 3 depends on it")
	}

	t.Run("3-no-leak", func(t *testing.T) {
		n2, n3 := c.nodes[1], c.nodes[2]
		start := time.Now()
		require.NoError(t, n2.removeImage(img.Ref))
		rm2 := time.Since(start)
		c.requireSharedBlobs(t, img)
		requireReady(t, img, c.nodes[2:])
		c.requireRefs(t, img, c.nodes[2:])
		start = time.Now()
		require.NoError(t, n3.removeImage(img.Ref))
		rm3 := time.Since(start)
		blobs, err := sharedFiles(c.shared, "blobs/sha256")
		require.NoError(t, err)
		ingests, err := ingestRefs(c.shared)
		require.NoError(t, err)
		assert.Empty(t, blobs, "shared blobs/sha256 after every node removed the image")
		assert.Empty(t, ingests, "shared ingest/ after every node removed the image")
		c.requireRefs(t, img, nil)
		_, gets := getsOf(c.reg, img.all())
		report(t, "%s3 no leak: rm --sync on n2 (%.2fs, blobs kept for n3) then n3 (%.2fs): shared blobs/ %d entries, ingest/ %d entries; references 0; registry GETs still %d, %.1f MB",
			c.tag, rm2.Seconds(), rm3.Seconds(), len(blobs), len(ingests), gets, mb(c.reg.BlobBytes()))
	})
}

// Scenario 4's figures: a layer large enough to be mid-download when the
// holder dies, over a throttled uplink.
const (
	bigLayerSize  = 200 << 20
	bigBandwidth  = 20 << 20
	inFlightBytes = bigLayerSize / 5 // "in flight": 20% downloaded
	// commitSlack covers OpenWriter's back-off (up to 2 s between tries)
	// and the coordinator's expiry sweep.
	commitSlack = 5 * time.Second
	// unpackAllowance bounds unpacking the layer once committed: it is
	// read back through containerd's content proxy, one gRPC stream per
	// ReadAt, slower still when the plugin is race-built.
	unpackAllowance = 90 * time.Second
)

// TestHolderKilled is scenario 4: kill -9 the plugin of the node that holds
// the pull lock of a large layer while it downloads.
func TestHolderKilled(t *testing.T) {
	runHolderKilled(t, newCluster(t, registry.WithBandwidth(bigBandwidth)))
}

// runHolderKilled is scenario 4 on c (registry at bigBandwidth).
func runHolderKilled(t *testing.T, c *cluster) {
	img := pushImage(t, c.reg, "e2e/big", bigLayerSize)
	layer := img.Layers[0].Digest.String()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	start := time.Now()
	pulls := startPulls(ctx, c, img.Ref)
	// Wait until one node holds the layer's pull lock and has 20% of it.
	holder, others := layerHolder(t, c, layer, 0, inFlightBytes)
	per, _ := getsOf(c.reg, []string{layer})
	require.Equal(t, 1, per[layer], "only the holder downloads the layer")
	ingests, _ := ingestRefs(c.shared)
	sent := c.reg.BlobBytes()
	t.Logf("holder %s has %.1f MB of the layer from the registry after %.1fs; ingests: %v",
		holder.id, mb(sent), time.Since(start).Seconds(), ingests)

	holder.killPlugin()
	killed := time.Now()

	// A successor commits the layer within one lease TTL plus the download;
	// the other nodes' pulls then complete (after unpacking it, which reads
	// the layer back through the plugin).
	download := time.Duration(float64(img.size()) / float64(bigBandwidth) * float64(time.Second))
	bound := leaseTTL + download + commitSlack
	committed, afterKill := awaitSuccessor(t, c, layer, killed, bound, bound+time.Minute, pulls, others)
	assert.LessOrEqual(t, committed, bound, "layer committed %v after the kill; bound: lease TTL %v + download %v + %v",
		committed, leaseTTL, download, commitSlack)
	st, err := c.ls.status("pull", layer)
	require.NoError(t, err)
	takenBy := "?"
	if st.Completed != nil {
		takenBy = st.Completed.NodeID
	}

	// The killed node restarts; its interrupted pull ends one way or the
	// other, and its next pull completes.
	holder.startPlugin()
	var first string
	select {
	case r := <-pulls[holder.id]:
		if r.err != nil {
			first = "failed: " + errorKind(r.err.Error())
		} else {
			first = fmt.Sprintf("completed after the restart (%.1fs in all)", r.elapsed.Seconds())
		}
	case <-time.After(time.Minute):
		cancel()
		first = "still running a minute after the restart; killed"
		<-pulls[holder.id]
	}
	t.Logf("%s's interrupted pull: %s", holder.id, first)
	again := time.Now()
	require.NoError(t, holder.pull(img.Ref, pullTimeout), "%s's next pull after its plugin restarted", holder.id)
	repull := time.Since(again)
	requireReady(t, img, c.nodes)
	c.requireRefs(t, img, c.nodes)

	per, gets := getsOf(c.reg, img.all())
	assert.Equal(t, 1, per[img.Config.Digest.String()], "GETs of the config")
	assert.Equal(t, 2, per[layer], "GETs of the layer: the killed holder's and its successor's")

	ingests, err = ingestRefs(c.shared)
	require.NoError(t, err)
	var left []string
	for ref, size := range ingests {
		assert.True(t, strings.HasPrefix(ref, holder.id+"/"), "ingest %q (%d bytes) left in the shared dir is not %s's", ref, size, holder.id)
		left = append(left, fmt.Sprintf("%s %.1f MB", errorKind(ref), mb(size)))
	}
	// The killed node's GC aborts its leftover ingest.
	require.NoError(t, holder.removeImage(img.Ref))
	ingests, err = ingestRefs(c.shared)
	require.NoError(t, err)
	assert.Empty(t, ingests, "ingests left after %s's GC", holder.id)
	report(t, "%s4 holder killed: %s held the %.0f MB layer, killed -9 at %.1f MB; %s took over and committed it %.1fs after the kill (bound %.0fs = TTL %v + download %.1fs + %v); pulls done after the kill: %s; restarted %s: interrupted pull %s; next pull ok in %.2fs; GETs %d (layer %d), %.1f MB; ingest left: %s, aborted by %s's GC (rm --sync)",
		c.tag, holder.id, mb(img.Layers[0].Size), mb(sent), takenBy, committed.Seconds(), bound.Seconds(), leaseTTL,
		download.Seconds(), commitSlack, strings.Join(afterKill, ", "), holder.id, first, repull.Seconds(), gets, per[layer],
		mb(c.reg.BlobBytes()), orNone(left), holder.id)
}

// TestLockServerRestart is scenario 5: the coordinator restarts between
// pulls; reference sets survive, so a GC after the restart still keeps the
// blobs the other nodes use.
func TestLockServerRestart(t *testing.T) {
	c := newCluster(t, registry.WithBandwidth(concurrentBandwidth))
	img := pushImage(t, c.reg, "e2e/restart", 8<<20, 8<<20)
	n1 := c.nodes[0]

	require.NoError(t, n1.pull(img.Ref, pullTimeout))
	c.requireRefs(t, img, c.nodes[:1])

	t0 := time.Now()
	c.ls.restart()
	restart1 := time.Since(t0)
	c.requireRefs(t, img, c.nodes[:1])

	start := time.Now()
	for _, r := range pullAll(c.nodes[1:], img.Ref, pullTimeout) {
		require.NoError(t, r.err, "pull on %s after the coordinator restarted", r.node.id)
	}
	pulls := time.Since(start)
	gets := requireSingleDownload(t, c.reg, img)
	c.requireRefs(t, img, c.nodes)

	c.ls.restart()
	c.requireRefs(t, img, c.nodes)
	require.NoError(t, n1.removeImage(img.Ref))
	c.requireSharedBlobs(t, img)
	requireReady(t, img, c.nodes[1:])
	reads := requireReadable(t, img, c.nodes[1:])
	c.requireRefs(t, img, c.nodes[1:])
	report(t, "5 coordinator restart: n1 pulled; restart (%.2fs); references kept; n2,n3 pulled in %.2fs, total %d GETs for %d blobs + manifest, %.1f MB (no re-download); restart; GC on n1 kept all %d blobs, n2,n3 complete, %d/%d read back; references n2,n3",
		restart1.Seconds(), pulls.Seconds(), gets, len(img.blobs()), mb(c.reg.BlobBytes()), len(img.all()), reads, reads)
}

func orNone(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, "; ")
}
