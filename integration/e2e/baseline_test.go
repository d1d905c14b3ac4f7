package e2e

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sharedcontent/sharedcontent/internal/testutil/registry"
)

// The image and bandwidth of scenario 1 and of the baseline, so their
// figures compare.
const (
	concurrentLayers    = 3
	concurrentLayerSize = 16 << 20
	// concurrentBandwidth is the registry's uplink, shared by all nodes.
	concurrentBandwidth = 64 << 20
	pullTimeout         = 3 * time.Minute
	// baselineRounds is how often the baseline repeats its concurrent
	// pull: what goes wrong depends on timing.
	baselineRounds = 3
)

// TestBaseline is scenario 6: three stock containerd daemons whose built-in
// content stores are one shared directory (each node's
// <root>/io.containerd.content.v1.content is a symlink to it). It records
// what happens and asserts nothing about it: this is what sharedcontent
// fixes.
//
// Each round pulls a new image on fresh nodes concurrently, then retries the
// failed nodes one at a time. The GC phase pulls on three fresh nodes one
// after the other (which works) and then removes the image on node 1.
func TestBaseline(t *testing.T) {
	needContainerd(t)
	e := newEnv(t)
	reg, err := registry.Start(registry.WithBandwidth(concurrentBandwidth))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { reg.Close() })

	var rounds []string
	errKinds := map[string]int{}
	for r := 1; r <= baselineRounds; r++ {
		prefix := "r" + strconv.Itoa(r)
		img := pushImage(t, reg, "e2e/baseline"+prefix, repeat(concurrentLayerSize, concurrentLayers)...)
		shared := e.path(prefix, "shared")
		nodes := e.startStockNodes(prefix, 3, shared)

		start := time.Now()
		res := pullAll(nodes, img.Ref, pullTimeout)
		elapsed := time.Since(start)
		var failed []*node
		for _, r := range res {
			if r.err != nil {
				failed = append(failed, r.node)
				errKinds[errorKind(r.err.Error())]++
				t.Logf("baseline %s: %s pull FAILED after %.2fs: %v", prefix, r.node.id, r.elapsed.Seconds(), r.err)
				continue
			}
			t.Logf("baseline %s: %s pull ok in %.2fs", prefix, r.node.id, r.elapsed.Seconds())
		}
		per, gets := getsOf(reg, img.blobs())
		line := fmt.Sprintf("%d/3 ok in %.2fs, %d GETs (%s), %.1f MB", 3-len(failed), elapsed.Seconds(),
			gets, perBlob(img, per), mb(reg.BlobBytes()))
		if len(failed) > 0 {
			retryOK := 0
			for _, n := range failed {
				if err := n.pull(img.Ref, pullTimeout); err != nil {
					errKinds[errorKind(err.Error())]++
					t.Logf("baseline %s: %s retry FAILED: %v", prefix, n.id, err)
					continue
				}
				retryOK++
			}
			line += fmt.Sprintf(", sequential retry %d/%d ok", retryOK, len(failed))
		}
		t.Logf("baseline %s: %s", prefix, line)
		rounds = append(rounds, line)
		for _, n := range nodes {
			n.stop()
		}
		reg.ResetCounters()
	}

	// GC on node 1 after three uncontended pulls.
	img := pushImage(t, reg, "e2e/baseline-gc", repeat(concurrentLayerSize, concurrentLayers)...)
	shared := e.path("gc", "shared")
	nodes := e.startStockNodes("gc", 3, shared)
	for _, n := range nodes {
		if err := n.pull(img.Ref, pullTimeout); err != nil {
			t.Fatalf("baseline: an uncontended pull failed: %v", err)
		}
	}
	_, seqGets := getsOf(reg, img.blobs())
	blobsBefore, _ := sharedFiles(shared, "blobs/sha256")
	if err := nodes[0].removeImage(img.Ref); err != nil {
		t.Logf("baseline: n1 images rm --sync: %v", err)
	}
	blobsAfter, _ := sharedFiles(shared, "blobs/sha256")
	t.Logf("baseline: after `ctr images rm --sync` on n1 the shared blobs/ holds %d of %d blobs",
		len(blobsAfter), len(blobsBefore))
	var broken []string
	reads, notReady := 0, 0
	for _, n := range nodes[1:] {
		ready, err := n.readyImages()
		if err != nil || !slices.Contains(ready, img.Ref) {
			notReady++
		}
		if err != nil {
			t.Logf("baseline: %s `ctr images check -q` after GC on n1: %s", n.id, errorKind(err.Error()))
		} else {
			t.Logf("baseline: %s `ctr images check -q` after GC on n1: ready %v", n.id, ready)
		}
		for _, d := range img.all() {
			reads++
			got, _, err := n.contentDigest(d)
			switch {
			case err != nil:
				broken = append(broken, err.Error())
			case got != d:
				broken = append(broken, fmt.Sprintf("%s content get %s: read %s", n.id, short(d), short(got)))
			}
		}
	}
	readErrs := map[string]int{}
	for _, b := range broken {
		readErrs[errorKind(b)]++
	}
	for k, n := range readErrs {
		t.Logf("baseline: %d× %s", n, k)
	}
	var kinds []string
	for k, n := range errKinds {
		kinds = append(kinds, fmt.Sprintf("%d× %s", n, k))
	}
	slices.Sort(kinds)
	report(t, "6 baseline, stock store shared by 3: concurrent pull rounds: [%s]; errors seen: [%s]; 3 sequential pulls: %d GETs for %d blobs; GC on n1 then removed %d/%d shared blobs: images check not ready on %d/2 other nodes, %d/%d content reads fail",
		strings.Join(rounds, "] ["), strings.Join(kinds, " | "), seqGets, len(img.blobs()),
		len(blobsBefore)-len(blobsAfter), len(blobsBefore), notReady, len(broken), reads)
	if len(broken) > 0 {
		report(t, "6 baseline: first failed read: %s", errorKind(broken[0]))
	}
}

// perBlob formats the GETs of each blob ("1,3,3,3"), config first.
func perBlob(img testImage, per map[string]int) string {
	var s []string
	for _, d := range img.blobs() {
		s = append(s, strconv.Itoa(per[d]))
	}
	return "per blob " + strings.Join(s, ",")
}

var (
	contentDirRE = regexp.MustCompile(`/tmp/sc[0-9]+/\S*?io\.containerd\.content\.v1\.content/`)
	hexRE        = regexp.MustCompile(`(sha256:)?[0-9a-f]{64}`)
	urlRE        = regexp.MustCompile(`http://127\.0\.0\.1:[0-9]+/\S*`)
	tmpRE        = regexp.MustCompile(`/tmp/sc[0-9]+/`)
)

// errorKind reduces a ctr error to its message with the node's paths,
// URLs and digests elided, so that equal failures compare equal.
func errorKind(s string) string {
	if i := strings.Index(s, "ctr: "); i >= 0 {
		s = s[i+len("ctr: "):]
	}
	s = contentDirRE.ReplaceAllString(s, "<content>/")
	s = urlRE.ReplaceAllString(s, "<registry blob URL>")
	s = tmpRE.ReplaceAllString(s, "<tmp>/")
	return hexRE.ReplaceAllString(s, "<digest>")
}

func repeat(size int64, n int) []int64 {
	out := make([]int64, n)
	for i := range out {
		out[i] = size
	}
	return out
}
