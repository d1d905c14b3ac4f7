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

	"github.com/sharedcontent/sharedcontent/integration/registry"
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

// startImageCoordinator imports the image into a containerd of its own
// (`ctr images import`) and runs the coordinator from it with `ctr run
// --net-host`, as the image's own non-root user, its data directory bind
// mounted at the same path. The returned lockServer restarts as the host
// binary's does (each start is a new container).
func (e *env) startImageCoordinator(tarball string) *lockServer {
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
	ref := names[0]

	l := &lockServer{e: e, addr: freePort(t), dataDir: e.path("coordinator-data")}
	require.NoError(t, os.MkdirAll(l.dataDir, 0o700))
	require.NoError(t, os.Chown(l.dataDir, imageUser, imageUser), "the image's user owns the database")
	// launch runs bin with the coordinator's flags: this wrapper makes
	// them the container's. ctr run forwards signals to the task and
	// --rm removes the container when it exits.
	wrapper := e.path("image", "ctr-run-coordinator")
	script := fmt.Sprintf("#!/bin/sh\nexec %q --address %q run --rm --net-host --mount type=bind,src=%s,dst=%s,options=rbind:rw %q coordinator-$$ /usr/local/bin/sharedcontent-lockserver \"$@\"\n",
		bins.ctr, host.sock, l.dataDir, l.dataDir, ref)
	require.NoError(t, os.WriteFile(wrapper, []byte(script), 0o755))
	l.bin = wrapper
	l.start()
	e.onCleanup(func() { l.p.stop(stopGrace) })
	return l
}

// TestImageCoordinator (issue 27): the coordinator runs from the OCI image
// `make image` builds, imported into a real containerd and started with
// `ctr run` (runc, host network, the image's non-root user); scenarios
// 1–3 pass against it exactly as against the host binary: one GET per
// blob, GC on one node breaks no other, nothing leaks. The nodes' daemons
// are the host binaries (not yet from the image).
func TestImageCoordinator(t *testing.T) {
	needSharedcontent(t)
	tarball := buildOCIImage(t)
	e := newEnv(t)
	reg, err := registry.Start(registry.WithBandwidth(concurrentBandwidth))
	require.NoError(t, err)
	t.Cleanup(func() { reg.Close() })
	shared := e.path("shared")
	c := &cluster{e: e, reg: reg, shared: shared, tag: "image coordinator: "}
	c.ls = e.startImageCoordinator(tarball)
	c.nodes = e.startSharedNodes([]string{shared, shared, shared}, c.ls.url())
	runSharedContent(t, c)
}
