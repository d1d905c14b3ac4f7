package e2e

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sharedcontent/sharedcontent/internal/testutil/registry"
	"github.com/sharedcontent/sharedcontent/plugin"
)

// pullLocal pulls ref with `ctr images pull --local`: the client fetches
// and unpacks through containerd's content and diff services instead of
// the transfer service.
func (n *node) pullLocal(ref string, timeout time.Duration) error {
	var out bytes.Buffer
	return n.ctrTo(context.Background(), &out, &out, timeout, "images", "pull", "--local", "--plain-http", ref)
}

// appliedByPlugin returns how many times the node's plugin logged applying
// each digest (plugin.AppliedMessage): its Diff API unpacked that layer.
func (n *node) appliedByPlugin() (map[string]int, error) {
	b, err := os.ReadFile(n.e.path(n.logName("plugin.log")))
	if err != nil {
		return nil, err
	}
	out := map[string]int{}
	for _, line := range strings.Split(string(b), "\n") {
		if !strings.Contains(line, plugin.AppliedMessage) {
			continue
		}
		for _, f := range strings.Fields(line) {
			if d, ok := strings.CutPrefix(f, "digest="); ok {
				out[strings.Trim(d, `"`)]++
			}
		}
	}
	return out, nil
}

// requireAppliedOnce checks that the plugin applied every layer of img
// exactly once since before (a count from appliedByPlugin).
func requireAppliedOnce(t *testing.T, n *node, img testImage, before map[string]int) {
	t.Helper()
	after, err := n.appliedByPlugin()
	require.NoError(t, err)
	for _, l := range img.Layers {
		d := l.Digest.String()
		require.Equal(t, 1, after[d]-before[d], "%s: layers of %s applied by sharedcontent-diff", n.id, short(d))
	}
}

// TestDiffer: containerd unpacks through the sharedcontent-diff proxy
// plugin in both pull paths, as deploy/containerd-config.toml configures
// it, and a node without it still unpacks (with containerd's own differ).
func TestDiffer(t *testing.T) {
	needSharedcontent(t)
	e := newEnv(t)
	reg, err := registry.Start()
	require.NoError(t, err)
	t.Cleanup(func() { reg.Close() })
	shared := e.path("shared")
	ls := e.startLockServer()
	n1 := e.startSharedNode("n1", shared, ls.url())

	t.Run("transfer-service", func(t *testing.T) {
		img := pushImage(t, reg, "e2e/differ-transfer", 4<<20, 4<<20)
		before, err := n1.appliedByPlugin()
		require.NoError(t, err)
		start := time.Now()
		require.NoError(t, n1.pull(img.Ref, pullTimeout))
		elapsed := time.Since(start)
		requireAppliedOnce(t, n1, img, before)
		requireReady(t, img, []*node{n1})
		report(t, "differ: `ctr images pull` (transfer service) unpacked both layers through sharedcontent-diff in %.2fs; image complete and unpacked", elapsed.Seconds())
	})

	t.Run("local-pull", func(t *testing.T) {
		img := pushImage(t, reg, "e2e/differ-local", 4<<20, 4<<20)
		before, err := n1.appliedByPlugin()
		require.NoError(t, err)
		start := time.Now()
		require.NoError(t, n1.pullLocal(img.Ref, pullTimeout))
		elapsed := time.Since(start)
		requireAppliedOnce(t, n1, img, before)
		requireReady(t, img, []*node{n1})
		report(t, "differ: `ctr images pull --local` (diff service) unpacked both layers through sharedcontent-diff in %.2fs; image complete and unpacked", elapsed.Seconds())
	})

	t.Run("snapshot-diff", func(t *testing.T) {
		// A diff of a snapshot (what commits and builds do) is written
		// to containerd's content store and reads back through it.
		img := pushImage(t, reg, "e2e/differ-compare", 1<<20, 2<<20)
		require.NoError(t, n1.pull(img.Ref, pullTimeout))
		top, err := n1.topSnapshot()
		require.NoError(t, err)
		var out, errOut bytes.Buffer
		require.NoError(t, n1.ctrTo(context.Background(), &out, &errOut, time.Minute, "snapshots", "diff", "--keep", top))
		size := out.Len()
		names, err := tarNames(&out)
		require.NoError(t, err)
		require.Contains(t, names, "layer1.bin", "`ctr snapshots diff %s` holds the top layer's file", short(top))
		report(t, "differ: `ctr snapshots diff` of the top layer: %d bytes read back through containerd's content store, holds layer1.bin", size)
	})

	t.Run("without-diff-plugin", func(t *testing.T) {
		// A node whose containerd is not configured with sharedcontent-diff
		// still pulls and unpacks, and our daemon applies nothing.
		n2 := e.newSharedNode("n2", shared, ls.url())
		n2.noDiffer = true
		n2.startPlugin()
		n2.startContainerd(n2.config(true))
		img := pushImage(t, reg, "e2e/differ-none", 4<<20, 4<<20)
		require.NoError(t, n2.pull(img.Ref, pullTimeout))
		require.NoError(t, n2.pullLocal(img.Ref, pullTimeout))
		requireReady(t, img, []*node{n2})
		applied, err := n2.appliedByPlugin()
		require.NoError(t, err)
		require.Empty(t, applied, "n2 has no sharedcontent-diff; its plugin applied nothing")
		report(t, "differ: a node without sharedcontent-diff pulls and unpacks with containerd's own differ; its plugin applied 0 layers")
	})
}

// topSnapshot returns the key of a committed snapshot that has a parent:
// the top layer of one of the node's two-layer images, whose file is
// layer1.bin.
func (n *node) topSnapshot() (string, error) {
	out, err := n.ctr(time.Minute, "snapshots", "ls")
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(out, "\n")[1:] {
		f := strings.Fields(line)
		if len(f) == 3 && f[2] == "Committed" && strings.HasPrefix(f[1], "sha256:") {
			return f[0], nil
		}
	}
	return "", fmt.Errorf("%s: no committed snapshot with a parent in:\n%s", n.id, out)
}

// tarNames lists the entries of a gzip tar stream.
func tarNames(r io.Reader) ([]string, error) {
	zr, err := gzip.NewReader(r)
	if err != nil {
		return nil, err
	}
	tr := tar.NewReader(zr)
	var names []string
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return names, nil
		}
		if err != nil {
			return names, err
		}
		names = append(names, h.Name)
	}
}
