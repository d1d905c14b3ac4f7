package e2e

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

// Environment variables that drive the suite.
const (
	// envEnable must be "1" for anything to run; `make e2e` sets it.
	envEnable = "SHAREDCONTENT_E2E"
	// envBinDir overrides where binaries are built and cached
	// (default <repo>/.cache/bin).
	envBinDir = "SHAREDCONTENT_E2E_BIN"
	// envRace set to "0" builds our daemons without the race detector
	// (default: with it, and a reported data race fails the test).
	envRace = "SHAREDCONTENT_E2E_RACE"
	// envKeepLogs names a directory that receives every test's logs,
	// failed or not (default: only failed tests' logs, under
	// <repo>/.cache/e2e-logs).
	envKeepLogs = "SHAREDCONTENT_E2E_LOGS"
)

// bins are the binaries the suite runs. A field is empty when it could not be
// built; the matching skip reason says why.
var bins struct {
	containerd, ctr, plugin, lockserver string
	// ctl is sharedcontentctl, the operator's tool (fault scenarios only).
	ctl string
}

var (
	repoRoot string
	// binDir is where the binaries are built and cached.
	binDir string
	// skipAll is set when nothing can run (not enabled, not root).
	skipAll string
	// skipContainerd is set when containerd or ctr could not be built.
	skipContainerd string
	// skipSharedcontent is set when our daemons could not be built.
	skipSharedcontent string
	// skipCtl is set when sharedcontentctl could not be built.
	skipCtl string
	// raceBuild reports whether our daemons carry the race detector.
	raceBuild bool
)

func TestMain(m *testing.M) {
	start := time.Now()
	setup()
	code := m.Run()
	printSummary(time.Since(start))
	os.Exit(code)
}

func setup() {
	wd, err := os.Getwd()
	if err != nil {
		skipAll = "e2e: " + err.Error()
		return
	}
	repoRoot = filepath.Clean(filepath.Join(wd, "..", ".."))
	if os.Getenv(envEnable) != "1" {
		skipAll = fmt.Sprintf("e2e: skipped; set %s=1 (or run `make e2e`) to run real containerd daemons", envEnable)
		return
	}
	if uid := os.Geteuid(); uid != 0 {
		skipAll = fmt.Sprintf("e2e: skipped; needs root (containerd mounts overlayfs and owns /run/containerd), running as uid %d", uid)
		return
	}
	binDir = os.Getenv(envBinDir)
	if binDir == "" {
		binDir = filepath.Join(repoRoot, ".cache", "bin")
	}
	if err := os.MkdirAll(binDir, 0o755); err != nil {
		skipAll = "e2e: " + err.Error()
		return
	}

	// containerd + ctr: pinned in integration/tools, cached by build.sh.
	t0 := time.Now()
	if out, err := run(repoRoot, nil, "bash", filepath.Join(repoRoot, "integration", "tools", "build.sh"), binDir); err != nil {
		skipContainerd = fmt.Sprintf("e2e: skipped; cannot build containerd/ctr with integration/tools/build.sh: %v\n%s", err, tail(out, 30))
	} else {
		bins.containerd = filepath.Join(binDir, "containerd")
		bins.ctr = filepath.Join(binDir, "ctr")
		fmt.Printf("e2e: containerd and ctr ready (%.1fs): %s", time.Since(t0).Seconds(), lastLine(out))
	}

	// Our daemons, with the race detector unless told otherwise.
	raceBuild = os.Getenv(envRace) != "0"
	flags := []string{"build", "-trimpath"}
	if raceBuild {
		flags = append(flags, "-race")
	}
	var errs []string
	for _, b := range []struct {
		name string
		dst  *string
	}{
		{"sharedcontent-lockserver", &bins.lockserver},
		{"containerd-sharedcontent", &bins.plugin},
	} {
		t0 := time.Now()
		out := filepath.Join(binDir, b.name)
		args := append(append([]string{}, flags...), "-o", out, "./cmd/"+b.name)
		if msg, err := run(repoRoot, nil, "go", args...); err != nil {
			errs = append(errs, fmt.Sprintf("go %s: %v\n%s", strings.Join(args, " "), err, tail(msg, 30)))
			continue
		}
		*b.dst = out
		fmt.Printf("e2e: built %s (race=%v, %.1fs)\n", b.name, raceBuild, time.Since(t0).Seconds())
	}
	if len(errs) > 0 {
		skipSharedcontent = "e2e: skipped; cannot build our daemons:\n" + strings.Join(errs, "\n")
	}

	// sharedcontentctl: a short-lived command, built without the race
	// detector; only the fault scenarios need it.
	t0 = time.Now()
	ctl := filepath.Join(binDir, "sharedcontentctl")
	if msg, err := run(repoRoot, nil, "go", "build", "-trimpath", "-o", ctl, "./cmd/sharedcontentctl"); err != nil {
		skipCtl = fmt.Sprintf("e2e: skipped; cannot build sharedcontentctl: %v\n%s", err, tail(msg, 30))
	} else {
		bins.ctl = ctl
		fmt.Printf("e2e: built sharedcontentctl (%.1fs)\n", time.Since(t0).Seconds())
	}

	prebuildFailpoints()
}

// selected reports whether -run may select the top-level test name (a
// -run that does not compile may: the test run says why).
func selected(name string) bool {
	if !flag.Parsed() {
		flag.Parse()
	}
	f := flag.Lookup("test.run")
	if f == nil || f.Value.String() == "" {
		return true
	}
	top, _, _ := strings.Cut(f.Value.String(), "/")
	re, err := regexp.Compile(top)
	return err != nil || re.MatchString(name)
}

// needContainerd skips t unless containerd and ctr are available.
func needContainerd(t *testing.T) {
	t.Helper()
	if skipAll != "" {
		t.Skip(skipAll)
	}
	if skipContainerd != "" {
		t.Skip(skipContainerd)
	}
}

// needSharedcontent skips t unless containerd, ctr and our daemons are
// available.
func needSharedcontent(t *testing.T) {
	t.Helper()
	needContainerd(t)
	if skipSharedcontent != "" {
		t.Skip(skipSharedcontent)
	}
}

// needCtl skips t unless everything needSharedcontent needs and
// sharedcontentctl are available.
func needCtl(t *testing.T) {
	t.Helper()
	needSharedcontent(t)
	if skipCtl != "" {
		t.Skip(skipCtl)
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

var summary struct {
	mu    sync.Mutex
	lines []string // protected by mu
}

// report logs one scenario's summary line and keeps it for the final table.
func report(t *testing.T, format string, args ...any) {
	t.Helper()
	line := fmt.Sprintf(format, args...)
	t.Log(line)
	summary.mu.Lock()
	defer summary.mu.Unlock()
	summary.lines = append(summary.lines, line)
}

func printSummary(total time.Duration) {
	summary.mu.Lock()
	defer summary.mu.Unlock()
	if len(summary.lines) == 0 {
		return
	}
	fmt.Println("\n=== e2e summary")
	for _, l := range summary.lines {
		fmt.Println("  " + l)
	}
	fmt.Printf("  total %.1fs\n", total.Seconds())
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = append([]string{fmt.Sprintf("... (%d lines omitted)", len(lines)-n)}, lines[len(lines)-n:]...)
	}
	return strings.Join(lines, "\n")
}

func lastLine(s string) string {
	s = strings.TrimRight(s, "\n")
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		s = s[i+1:]
	}
	return s + "\n"
}
