package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sharedcontent/sharedcontent/internal/testutil/registry"
)

// imageUser is the image's default user (deploy/tools/mkimage), the
// coordinator's.
const imageUser = 65532

// ociImage is `make image` for this machine's platform, and the
// containerd shim `ctr run` needs, built once per test binary.
var ociImage struct {
	once    sync.Once
	tarball string // the OCI layout tarball
	skip    string // why the image tests cannot run
}

// buildOCIImage builds the image with `make image` (the operators' command)
// and containerd-shim-runc-v2 beside containerd, or skips t.
func buildOCIImage(t *testing.T) string {
	t.Helper()
	ociImage.once.Do(func() {
		if _, err := exec.LookPath("runc"); err != nil {
			ociImage.skip = "e2e: skipped; no runc in PATH (make e2e installs Debian's)"
			return
		}
		// The shim, from the containerd module integration/tools pins; the
		// containerd daemon finds it beside its own binary.
		shim := filepath.Join(binDir, "containerd-shim-runc-v2")
		if out, err := run(filepath.Join(repoRoot, "integration", "tools"), []string{"GOWORK=off", "CGO_ENABLED=0"},
			"go", "build", "-trimpath", "-mod=readonly", "-o", shim, "github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2"); err != nil {
			ociImage.skip = fmt.Sprintf("e2e: skipped; cannot build containerd-shim-runc-v2: %v\n%s", err, tail(out, 30))
			return
		}
		t0 := time.Now()
		dir := filepath.Join(binDir, "image")
		if out, err := run(repoRoot, nil, "make", "--no-print-directory", "image", "BIN="+dir,
			"IMAGE_PLATFORMS=linux/"+runtime.GOARCH, "IMAGE_NAME=sharedcontent-e2e", "IMAGE_VERSION=e2e"); err != nil {
			ociImage.skip = fmt.Sprintf("e2e: skipped; make image failed: %v\n%s", err, tail(out, 30))
			return
		}
		ociImage.tarball = filepath.Join(dir, "sharedcontent-image.tar")
		fmt.Printf("e2e: built the OCI image (%.1fs)\n", time.Since(t0).Seconds())
	})
	if ociImage.skip != "" {
		t.Skip(ociImage.skip)
	}
	return ociImage.tarball
}

// importImage starts a containerd of its own (the image host) and imports
// the image into it with `ctr images import`; it returns the host and the
// image's name there.
func (e *env) importImage(tarball string) (*node, string) {
	t := e.t
	t.Helper()
	host := e.newNode("image", "host", e.path("image", "content"))
	host.startContainerd(host.config(false))
	out, err := host.ctr(2*time.Minute, "images", "import", "--platform", "linux/"+runtime.GOARCH, tarball)
	require.NoError(t, err, "ctr images import:\n%s", out)
	out, err = host.ctr(time.Minute, "images", "ls", "-q")
	require.NoError(t, err, out)
	names := strings.Fields(out)
	require.Len(t, names, 1, "ctr images import imports one image: %q", names)
	return host, names[0]
}

// ctrRunWrapper writes a script that runs binary from image ref on host
// with `ctr run --rm --net-host`, its own arguments appended, with runArgs
// (mounts, user) before the image; each run is a new container. Harness
// code that starts a binary with flags (lockServer.bin, node.pluginBin)
// starts the container instead: ctr run forwards signals to the task.
func (e *env) ctrRunWrapper(host *node, ref, binary string, runArgs ...string) string {
	t := e.t
	t.Helper()
	var quoted []string
	for _, a := range runArgs {
		quoted = append(quoted, fmt.Sprintf("%q", a))
	}
	wrapper := e.path("image", "ctr-run-"+binary)
	script := fmt.Sprintf("#!/bin/sh\nexec %q --address %q run --rm --net-host %s %q %s-$$ /usr/local/bin/%s \"$@\"\n",
		bins.ctr, host.sock, strings.Join(quoted, " "), ref, binary, binary)
	require.NoError(t, os.WriteFile(wrapper, []byte(script), 0o755))
	return wrapper
}

// bindSame is ctr run's --mount of dir at its own path.
func bindSame(dir string) []string {
	return []string{"--mount", fmt.Sprintf("type=bind,src=%s,dst=%s,options=rbind:rw", dir, dir)}
}

// startImageCoordinator runs the coordinator from the image on host, as
// the image's own non-root user, its data directory bind mounted at the
// same path. The returned lockServer restarts as the host binary's does.
func (e *env) startImageCoordinator(host *node, ref string) *lockServer {
	t := e.t
	t.Helper()
	l := &lockServer{e: e, addr: freePort(t), dataDir: e.path("coordinator-data")}
	require.NoError(t, os.MkdirAll(l.dataDir, 0o700))
	require.NoError(t, os.Chown(l.dataDir, imageUser, imageUser), "the image's user owns the database")
	l.bin = e.ctrRunWrapper(host, ref, "sharedcontent-lockserver", bindSame(l.dataDir)...)
	l.start()
	e.onCleanup(func() { l.p.stop(stopGrace) })
	return l
}

// TestImageCoordinator (docs/helm.md "The image"): the coordinator runs from the OCI image
// `make image` builds, imported into a real containerd and started with
// `ctr run` (runc, host network, the image's non-root user); scenarios
// 1–3 pass against it exactly as against the host binary: one GET per
// blob, GC on one node breaks no other, nothing leaks. The nodes' daemons
// are the host binaries.
func TestImageCoordinator(t *testing.T) {
	needSharedcontent(t)
	tarball := buildOCIImage(t)
	e := newEnv(t)
	reg, err := registry.Start(registry.WithBandwidth(concurrentBandwidth))
	require.NoError(t, err)
	t.Cleanup(func() { reg.Close() })
	shared := e.path("shared")
	c := &cluster{e: e, reg: reg, shared: shared, tag: "image coordinator: "}
	host, ref := e.importImage(tarball)
	c.ls = e.startImageCoordinator(host, ref)
	c.nodes = e.startSharedNodes([]string{shared, shared, shared}, c.ls.url())
	runSharedContent(t, c)
}

// TestImageNodes (docs/helm.md "The image"): the coordinator and every node's daemon run
// from the image: each daemon as root, privileged (it applies layers into
// containerd's snapshots), with the shared root, its socket, its state
// directory and its containerd's directories bind mounted at their own
// paths, as the Helm chart's DaemonSet runs it; scenarios 1–3 pass as
// with the host binaries.
func TestImageNodes(t *testing.T) {
	needSharedcontent(t)
	tarball := buildOCIImage(t)
	e := newEnv(t)
	reg, err := registry.Start(registry.WithBandwidth(concurrentBandwidth))
	require.NoError(t, err)
	t.Cleanup(func() { reg.Close() })
	shared := e.path("shared")
	c := &cluster{e: e, reg: reg, shared: shared, tag: "image nodes: "}
	host, ref := e.importImage(tarball)
	c.ls = e.startImageCoordinator(host, ref)
	// The environment's directory holds the shared root and every node's
	// directories (socket, state, containerd's root).
	daemon := e.ctrRunWrapper(host, ref, "containerd-sharedcontent",
		append([]string{"--privileged", "--user", "0:0"}, bindSame(e.dir)...)...)
	for i := 1; i <= 3; i++ {
		nd := e.newSharedNode(fmt.Sprintf("n%d", i), shared, c.ls.url())
		nd.pluginBin = daemon
		nd.startPlugin()
		nd.startContainerd(nd.config(true))
		c.nodes = append(c.nodes, nd)
	}
	runSharedContent(t, c)
}
