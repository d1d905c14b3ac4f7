package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pelletier/go-toml/v2"
	"github.com/stretchr/testify/require"

	"github.com/sharedcontent/sharedcontent/internal/testutil/registry"
)

// criBins are containerd with CRI and crictl, built by
// integration/tools/cri.sh next to the pinned binaries.
var criBins struct{ containerd, crictl string }

// criNamespace is CRI's containerd namespace.
const criNamespace = "k8s.io"

// reloadBound is how soon after the plugin serves again CRI must list
// every image it dropped (docs/design.md §6.1).
const reloadBound = time.Minute

// buildCRI builds criBins (cached; several minutes when cold).
func buildCRI(t *testing.T) {
	t.Helper()
	out, err := run(repoRoot, nil, "bash", filepath.Join(repoRoot, "integration", "tools", "cri.sh"), binDir)
	require.NoError(t, err, "integration/tools/cri.sh:\n%s", tail(out, 30))
	t.Logf("e2e: %s", lastLine(out))
	criBins.containerd = filepath.Join(binDir, "containerd-cri")
	criBins.crictl = filepath.Join(binDir, "crictl")
}

// startCRINode starts a sharedcontent node whose containerd runs CRI,
// pulling from reg over plain HTTP (hosts.toml); the plugin announces
// CRI's images to it (pluginArgv's --containerd-address). localPull makes CRI pull with
// containerd's client (use_local_image_pull) instead of the transfer
// service.
func (e *env) startCRINode(id, shared, lockURL string, reg *registry.Registry, localPull bool) *node {
	e.t.Helper()
	nd := e.newSharedNode(id, shared, lockURL)
	nd.pluginArgs = []string{"--containerd-namespace", criNamespace}
	nd.containerdBin = criBins.containerd
	nd.startPlugin()
	nd.startContainerd(nd.criConfig(reg, localPull))
	nd.waitCRI()
	return nd
}

// criConfig is the node's config (deploy/containerd-config.toml) with CRI
// enabled: images in the node's overlayfs, registries from the node's
// hosts.toml directory, no CNI or NRI (no pod runs), and runc not asked
// to write oom_score_adj (unprivileged here).
func (n *node) criConfig(reg *registry.Registry, localPull bool) []byte {
	t := n.e.t
	t.Helper()
	hosts := filepath.Join(n.dir, "certs.d")
	require.NoError(t, os.MkdirAll(filepath.Join(hosts, reg.Host), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(hosts, reg.Host, "hosts.toml"), fmt.Appendf(nil,
		"server = \"http://%[1]s\"\n\n[host.\"http://%[1]s\"]\n  capabilities = [\"pull\", \"resolve\"]\n", reg.Host), 0o644))
	cfg := map[string]any{}
	require.NoError(t, toml.Unmarshal(n.config(true), &cfg))
	var disabled []any
	for _, p := range cfg["disabled_plugins"].([]any) {
		if p != "io.containerd.grpc.v1.cri" {
			disabled = append(disabled, p)
		}
	}
	cfg["disabled_plugins"] = disabled
	plugins := cfg["plugins"].(map[string]any)
	plugins["io.containerd.cri.v1.images"] = map[string]any{
		"snapshotter":          "overlayfs",
		"use_local_image_pull": localPull,
		"registry":             map[string]any{"config_path": hosts},
	}
	plugins["io.containerd.cri.v1.runtime"] = map[string]any{
		"restrict_oom_score_adj": true,
		"cni":                    map[string]any{"bin_dirs": []any{filepath.Join(n.dir, "cni", "bin")}, "conf_dir": filepath.Join(n.dir, "cni", "net.d")},
	}
	plugins["io.containerd.grpc.v1.cri"] = map[string]any{"stream_server_address": "127.0.0.1", "stream_server_port": "0"}
	b, err := toml.Marshal(cfg)
	require.NoError(t, err)
	return b
}

// waitCRI waits until CRI answers (it answers only once it has loaded
// containerd's images, however long checking them takes).
func (n *node) waitCRI() {
	t := n.e.t
	t.Helper()
	p := n.containerd
	// Checking the images takes a dial timeout when the plugin is down.
	waitFor(t, n.id+" CRI", 4*startTimeout, func() (bool, error) {
		if p.exited() {
			return false, dead(p)
		}
		_, err := n.criImages()
		return err == nil, err
	})
}

// crictl runs crictl against the node's CRI and returns its standard
// output; every call, with its standard error, is appended to
// <node>/ctr.log.
func (n *node) crictl(timeout time.Duration, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	ep := "unix://" + n.sock
	argv := append([]string{"--runtime-endpoint", ep, "--image-endpoint", ep, "--timeout", timeout.String()}, args...)
	cmd := exec.CommandContext(ctx, criBins.crictl, argv...)
	cmd.Env = hermeticEnv()
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	if f, ferr := os.OpenFile(filepath.Join(n.dir, "ctr.log"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644); ferr == nil {
		fmt.Fprintf(f, "$ crictl %s\n%s%s(err: %v)\n", strings.Join(args, " "), errOut.String(), out.String(), err)
		f.Close()
	}
	if err != nil {
		return out.String(), fmt.Errorf("crictl %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(errOut.String()+out.String()))
	}
	return out.String(), nil
}

// criPull pulls ref through CRI, as kubelet does.
func (n *node) criPull(ref string) error {
	_, err := n.crictl(pullTimeout, "pull", ref)
	return err
}

// criImages returns the tags CRI lists (`crictl images`), i.e. what
// kubelet sees.
func (n *node) criImages() ([]string, error) {
	out, err := n.crictl(30*time.Second, "images", "-o", "json")
	if err != nil {
		return nil, err
	}
	var list struct {
		Images []struct {
			RepoTags []string `json:"repoTags"`
		} `json:"images"`
	}
	if err := json.Unmarshal([]byte(out), &list); err != nil {
		return nil, fmt.Errorf("crictl images: %w: %s", err, out)
	}
	var tags []string
	for _, i := range list.Images {
		tags = append(tags, i.RepoTags...)
	}
	return tags, nil
}

// requireCRIBlobsReadable checks the user's data-safety rule on CRI's
// namespace: every blob the node's containerd records there reads back
// with its digest. It returns the number of blobs read.
func requireCRIBlobsReadable(t *testing.T, n *node) int {
	t.Helper()
	blobs, err := n.contentListIn(criNamespace)
	require.NoError(t, err)
	for _, d := range blobs {
		got, _, err := n.contentDigestIn(criNamespace, d)
		require.NoError(t, err, "%s: content get -n %s %s", n.id, criNamespace, short(d))
		require.Equal(t, d, got, "%s: content get -n %s %s", n.id, criNamespace, short(d))
	}
	return len(blobs)
}

// TestCRIPulls: three nodes pull one image through CRI at once, twice
// each (kubelet's parallel pulls; the transfer service on n1, n2;
// containerd's local pull on n3, as use_local_image_pull selects), each
// blob downloaded once; then `crictl
// rmi` on n1 (CRI deletes the last tag synchronously, which runs the
// garbage collector) leaves n2's and n3's every blob readable.
func TestCRIPulls(t *testing.T) {
	needSharedcontent(t)
	buildCRI(t)
	e := newEnv(t)
	reg, err := registry.Start(registry.WithBandwidth(concurrentBandwidth))
	require.NoError(t, err)
	t.Cleanup(func() { reg.Close() })
	shared := e.path("shared")
	ls := e.startLockServer()
	c := &cluster{e: e, reg: reg, ls: ls, shared: shared}
	for i := 1; i <= 3; i++ {
		c.nodes = append(c.nodes, e.startCRINode(fmt.Sprintf("n%d", i), shared, ls.url(), reg, i == 3))
	}
	img := pushImage(t, reg, "e2e/cri", repeat(concurrentLayerSize, concurrentLayers)...)

	// Two pulls per node, as kubelet with serializeImagePulls: false.
	start := time.Now()
	errs := make(chan error, 2*len(c.nodes))
	for _, n := range c.nodes {
		for range 2 {
			go func() { errs <- n.criPull(img.Ref) }()
		}
	}
	for range 2 * len(c.nodes) {
		require.NoError(t, <-errs)
	}
	elapsed := time.Since(start)
	gets := requireSingleDownload(t, reg, img)
	reads := 0
	for _, n := range c.nodes {
		tags, err := n.criImages()
		require.NoError(t, err)
		require.Contains(t, tags, img.Ref, "%s: crictl images", n.id)
		reads += requireCRIBlobsReadable(t, n)
	}
	c.requireSharedBlobs(t, img)
	report(t, "CRI: crictl pull twice on each of 3 nodes at once (transfer service on n1,n2; local pull on n3): 6/6 ok in %.2fs; %d GETs for %d blobs + manifest; listed by CRI on 3/3; %d blobs read back",
		elapsed.Seconds(), gets, len(img.blobs()), reads)

	n1 := c.nodes[0]
	_, err = n1.crictl(time.Minute, "rmi", img.Ref)
	require.NoError(t, err)
	tags, err := n1.criImages()
	require.NoError(t, err)
	require.NotContains(t, tags, img.Ref, "n1: crictl images after rmi")
	out, err := n1.ctr(60*time.Second, "-n", criNamespace, "content", "ls", "-q")
	require.NoError(t, err)
	for _, d := range img.all() {
		require.NotContains(t, strings.Fields(out), d, "n1 still records %s after crictl rmi", short(d))
	}
	c.requireSharedBlobs(t, img)
	reads = 0
	for _, n := range c.nodes[1:] {
		reads += requireCRIBlobsReadable(t, n)
	}
	c.requireRefs(t, img, c.nodes[1:])
	_, gets = getsOf(reg, img.all())
	report(t, "CRI: crictl rmi on n1 (GC): blobs kept in the shared dir; n2,n3 %d blobs read back; references n2,n3; registry GETs still %d", reads, gets)
}

// TestCRIContainerdRestartWhilePluginDown is a node's reboot with the
// plugin late (a DaemonSet pod, or a crash of it): containerd starts while
// the plugin is down, so CRI cannot read any image's content and drops
// them all. Once the plugin serves again, it announces every image to
// containerd and CRI lists them all again within reloadBound, with no
// download, and every blob reads back.
func TestCRIContainerdRestartWhilePluginDown(t *testing.T) {
	needSharedcontent(t)
	buildCRI(t)
	e := newEnv(t)
	reg, err := registry.Start()
	require.NoError(t, err)
	t.Cleanup(func() { reg.Close() })
	n := e.startCRINode("n1", e.path("shared"), "", reg, false)
	img := pushImage(t, reg, "e2e/reboot", 1<<20, 2<<20)
	require.NoError(t, n.criPull(img.Ref))
	tags, err := n.criImages()
	require.NoError(t, err)
	require.Contains(t, tags, img.Ref)
	bytesBefore := reg.BlobBytes()

	// The plugin dies; containerd restarts without it.
	n.killPlugin()
	cfg, err := os.ReadFile(filepath.Join(n.dir, "containerd.toml"))
	require.NoError(t, err)
	n.containerd.stop(stopGrace)
	n.startContainerd(cfg)
	n.waitCRI()
	tags, err = n.criImages()
	require.NoError(t, err)
	require.NotContains(t, tags, img.Ref, "CRI listed the image though containerd started while the plugin was down: nothing to recover")

	// The plugin comes back: CRI lists the image again, without a pull.
	n.startPlugin()
	back := time.Now()
	var listed time.Duration
	for {
		tags, err := n.criImages()
		if err == nil && slices.Contains(tags, img.Ref) {
			listed = time.Since(back)
			break
		}
		require.Less(t, time.Since(back), reloadBound, "CRI does not list %s again (last: %v, %v)", img.Ref, tags, err)
		time.Sleep(500 * time.Millisecond) // a poll, not a synchronisation
	}
	require.Equal(t, bytesBefore, reg.BlobBytes(), "registry bytes served while CRI recovered the image")
	reads := requireCRIBlobsReadable(t, n)
	require.GreaterOrEqual(t, reads, len(img.all()))
	report(t, "CRI: containerd restarted while the plugin was down: CRI listed 0 images; the plugin back, CRI listed %s again after %.1fs (bound %v), 0 registry bytes, %d blobs read back",
		img.Ref, listed.Seconds(), reloadBound, reads)

	// containerd restarts while the plugin serves: the plugin sees it go
	// and announces the images again once it is back.
	before := announcements(t, n)
	require.NotEmpty(t, before, "the plugin logged no announcement")
	n.containerd.stop(stopGrace)
	n.startContainerd(cfg)
	restarted := time.Now()
	var after []string
	for {
		after = announcements(t, n)
		if len(after) > len(before) {
			break
		}
		require.Less(t, time.Since(restarted), reloadBound, "the plugin did not announce the images again after containerd restarted")
		time.Sleep(500 * time.Millisecond) // a poll, not a synchronisation
	}
	require.NotContains(t, after[len(after)-1], "images=0", "the announcement after containerd's restart")
	n.waitCRI()
	tags, err = n.criImages()
	require.NoError(t, err)
	require.Contains(t, tags, img.Ref)
	report(t, "CRI: containerd restarted while the plugin served: the plugin announced the images again after %.1fs; CRI lists %s",
		time.Since(restarted).Seconds(), img.Ref)
}

// announcements returns the plugin's log lines that report an
// announcement of the images to containerd.
func announcements(t *testing.T, n *node) []string {
	t.Helper()
	b, err := os.ReadFile(n.plugin.logPath)
	require.NoError(t, err)
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if strings.Contains(l, "announced every image to containerd") {
			out = append(out, l)
		}
	}
	return out
}
