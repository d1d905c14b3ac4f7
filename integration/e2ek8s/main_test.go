package e2ek8s

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
)

// Environment variables that drive the test.
const (
	// envEnable must be "1" for anything to run; make e2e-k8s sets it.
	envEnable = "SHAREDCONTENT_E2E_K8S"
	// envBinDir is where binaries are found and built (default
	// <repo>/.cache/bin): kubelet & co. (integration/tools/k8s.sh),
	// containerd-cri and crictl (cri.sh).
	envBinDir = "SHAREDCONTENT_E2E_BIN"
	// envEtcd names the etcd binary (make etcd's bin/etcd).
	envEtcd = "SHAREDCONTENT_ETCD"
	// envHelm names the helm binary (the Makefile's $(HELM)).
	envHelm = "SHAREDCONTENT_HELM"
	// envMode set to "pod" installs the chart with node.mode=pod (default:
	// the chart's default, host mode).
	envMode = "SHAREDCONTENT_E2E_K8S_MODE"
	// envKeepLogs names a directory that receives the logs, failed or
	// not (default: failed runs' only, under <repo>/.cache/e2e-logs).
	envKeepLogs = "SHAREDCONTENT_E2E_LOGS"
)

// bins are the binaries the test runs (absolute paths).
var bins struct {
	kubelet, apiserver, controllerManager, scheduler string
	containerd, crictl, ctr, shim, runc              string
	etcd, helm, lockserver, nodeinit, pause, mkimage string
}

var (
	repoRoot string
	binDir   string
	// skipInit is why not even nodeinit can run; skip why the cluster
	// cannot ("" when everything is ready).
	skipInit, skip string
)

func TestMain(m *testing.M) {
	skipInit = setupInit()
	os.Exit(m.Run())
}

// setupInit checks the environment and builds nodeinit; it returns why
// nothing can run.
func setupInit() string {
	wd, err := os.Getwd()
	if err != nil {
		return err.Error()
	}
	repoRoot = filepath.Clean(filepath.Join(wd, "..", ".."))
	if os.Getenv(envEnable) != "1" {
		return fmt.Sprintf("e2e-k8s: skipped; set %s=1 (or run `make e2e-k8s`) to run a Kubernetes cluster of real kubelets", envEnable)
	}
	if os.Geteuid() != 0 {
		return fmt.Sprintf("e2e-k8s: skipped; needs root (namespaces, mounts, cgroups), running as uid %d", os.Geteuid())
	}
	if runtime.GOOS != "linux" {
		return "e2e-k8s: skipped; Linux only"
	}
	binDir = os.Getenv(envBinDir)
	if binDir == "" {
		binDir = filepath.Join(repoRoot, ".cache", "bin")
	}
	if err := os.MkdirAll(binDir, 0o755); err != nil {
		return err.Error()
	}
	bins.nodeinit = filepath.Join(binDir, "e2ek8s-nodeinit")
	if out, err := run(repoRoot, []string{"CGO_ENABLED=0"}, "go", "build", "-trimpath", "-o", bins.nodeinit, "./integration/e2ek8s/nodeinit"); err != nil {
		return fmt.Sprintf("e2e-k8s: skipped; go build nodeinit: %v\n%s", err, tail(out, 30))
	}
	return ""
}

// setup finds or builds every other binary; it returns why the cluster
// cannot run.
func setup() string {
	tools := filepath.Join(repoRoot, "integration", "tools")
	for _, script := range []string{"k8s.sh", "cri.sh"} {
		t0 := time.Now()
		out, err := run(repoRoot, nil, "bash", filepath.Join(tools, script), binDir)
		if err != nil {
			return fmt.Sprintf("e2e-k8s: skipped; integration/tools/%s: %v\n%s", script, err, tail(out, 30))
		}
		fmt.Printf("e2e-k8s: %s (%.1fs): %s\n", script, time.Since(t0).Seconds(), lastLine(out))
	}
	in := func(n string) string { return filepath.Join(binDir, n) }
	bins.kubelet, bins.apiserver, bins.controllerManager = in("kubelet"), in("kube-apiserver"), in("kube-controller-manager")
	bins.scheduler = in("kube-scheduler")
	bins.containerd, bins.crictl = in("containerd-cri"), in("crictl")

	// Go programs: ctr and the shim containerd runs pods with (from the
	// containerd module integration/tools pins, as containerd-cri), the
	// pause binary, the coordinator.
	t0 := time.Now()
	bins.ctr, bins.shim = in("ctr"), in("containerd-shim-runc-v2")
	for _, b := range []string{bins.ctr, bins.shim} {
		if out, err := run(tools, []string{"GOWORK=off", "CGO_ENABLED=0"}, "go", "build", "-trimpath", "-mod=readonly",
			"-o", b, "github.com/containerd/containerd/v2/cmd/"+filepath.Base(b)); err != nil {
			return fmt.Sprintf("e2e-k8s: skipped; cannot build %s: %v\n%s", filepath.Base(b), err, tail(out, 30))
		}
	}
	bins.pause, bins.lockserver = in("e2ek8s-pause"), in("sharedcontent-lockserver-e2ek8s")
	for _, b := range []struct{ out, pkg string }{
		{bins.pause, "./integration/e2ek8s/pause"},
		{bins.lockserver, "./cmd/sharedcontent-lockserver"},
	} {
		if out, err := run(repoRoot, []string{"CGO_ENABLED=0"}, "go", "build", "-trimpath", "-o", b.out, b.pkg); err != nil {
			return fmt.Sprintf("e2e-k8s: skipped; go build %s: %v\n%s", b.pkg, err, tail(out, 30))
		}
	}
	fmt.Printf("e2e-k8s: built ctr, the shim, pause, lockserver (%.1fs)\n", time.Since(t0).Seconds())

	var err error
	if bins.runc, err = exec.LookPath("runc"); err != nil {
		return "e2e-k8s: skipped; no runc in PATH (make e2e-k8s installs Debian's)"
	}
	if _, err := os.Stat("/usr/lib/cni/bridge"); err != nil {
		return "e2e-k8s: skipped; no CNI plugins in /usr/lib/cni (Debian's containernetworking-plugins; make e2e-k8s installs it)"
	}
	if bins.etcd = os.Getenv(envEtcd); bins.etcd == "" {
		bins.etcd = filepath.Join(repoRoot, "bin", "etcd")
	}
	if bins.helm = os.Getenv(envHelm); bins.helm == "" {
		bins.helm = in("helm")
	}
	for _, b := range []string{bins.etcd, bins.helm} {
		if _, err := os.Stat(b); err != nil {
			return fmt.Sprintf("e2e-k8s: skipped; %v (make e2e-k8s builds it: make etcd, $(HELM))", err)
		}
	}
	bins.mkimage = in("mkimage")
	return ""
}

// needInit skips t unless nodeinit can run.
func needInit(t *testing.T) {
	t.Helper()
	if skipInit != "" {
		t.Skip(skipInit)
	}
}

var setupOnce sync.Once

// need skips t unless the cluster can run; the first call finds or
// builds the binaries (the Kubernetes ones take long when cold).
func need(t *testing.T) {
	t.Helper()
	needInit(t)
	setupOnce.Do(func() { skip = setup() })
	if skip != "" {
		t.Skip(skip)
	}
}

// run runs a command to completion and returns its combined output.
func run(dir string, env []string, name string, args ...string) (string, error) {
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func lastLine(s string) string {
	s = strings.TrimRight(s, "\n")
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		s = s[i+1:]
	}
	return s
}
