package e2e

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sharedcontent/sharedcontent/contentv2"
)

// env owns everything one test starts: a short temporary directory (unix
// socket paths are limited to 108 bytes), the processes and their logs.
// Cleanup stops only those processes and unmounts only mounts under dir.
type env struct {
	t   *testing.T
	dir string

	mu       sync.Mutex
	logs     []string // protected by mu; every log file, in creation order
	stoppers []func() // protected by mu; run in reverse order at cleanup
}

func newEnv(t *testing.T) *env {
	t.Helper()
	dir, err := os.MkdirTemp("/tmp", "sc")
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, dir: dir}
	t.Cleanup(e.cleanup)
	t.Logf("e2e: working directory %s", dir)
	return e
}

// path joins elem under the environment's directory.
func (e *env) path(elem ...string) string {
	return filepath.Join(append([]string{e.dir}, elem...)...)
}

// addLog registers a log file to show when the test fails.
func (e *env) addLog(path string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, l := range e.logs {
		if l == path {
			return
		}
	}
	e.logs = append(e.logs, path)
}

// onCleanup registers f to run at cleanup, before anything registered
// earlier.
func (e *env) onCleanup(f func()) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.stoppers = append(e.stoppers, f)
}

// start starts a daemon whose output goes to log (relative to dir).
func (e *env) start(name, log string, environ []string, argv ...string) *proc {
	e.t.Helper()
	path := e.path(log)
	e.addLog(path)
	p, err := startProc(name, path, environ, argv...)
	if err != nil {
		e.t.Fatal(err)
	}
	return p
}

func (e *env) cleanup() {
	e.stopAll()
	mountsLeft := unmountUnder(e.t, e.dir)
	e.checkRaces()
	if e.t.Failed() || os.Getenv(envKeepLogs) != "" {
		e.dumpLogs()
	}
	if mountsLeft {
		e.t.Errorf("e2e: mounts remain under %s; not removing it", e.dir)
		return
	}
	if err := os.RemoveAll(e.dir); err != nil {
		e.t.Logf("e2e: remove %s: %v", e.dir, err)
	}
}

// stopAll stops everything the environment started, last first (once:
// a later call finds nothing left to stop).
func (e *env) stopAll() {
	e.mu.Lock()
	stoppers := e.stoppers
	e.stoppers = nil
	e.mu.Unlock()
	for i := len(stoppers) - 1; i >= 0; i-- {
		stoppers[i]()
	}
}

// checkRaces fails the test when a race-enabled daemon reported a data race.
func (e *env) checkRaces() {
	if !raceBuild {
		return
	}
	e.mu.Lock()
	logs := append([]string(nil), e.logs...)
	e.mu.Unlock()
	for _, l := range logs {
		b, err := os.ReadFile(l)
		if err == nil && strings.Contains(string(b), "WARNING: DATA RACE") {
			e.t.Errorf("e2e: %s reports a data race", filepath.Base(l))
		}
	}
}

// dumpLogs prints the tail of every log and copies all of them to a
// directory that survives the test.
func (e *env) dumpLogs() {
	e.mu.Lock()
	logs := append([]string(nil), e.logs...)
	e.mu.Unlock()
	keep := os.Getenv(envKeepLogs)
	if keep == "" {
		keep = filepath.Join(repoRoot, ".cache", "e2e-logs")
	}
	keep = filepath.Join(keep, strings.ReplaceAll(e.t.Name(), "/", "_"))
	_ = os.RemoveAll(keep)
	_ = os.MkdirAll(keep, 0o755)
	for _, l := range logs {
		rel, err := filepath.Rel(e.dir, l)
		if err != nil || strings.HasPrefix(rel, "..") {
			rel = filepath.Base(l) // outside the environment (etcd's members)
		}
		dst := filepath.Join(keep, strings.ReplaceAll(rel, "/", "_"))
		_ = copyFile(l, dst)
		if e.t.Failed() {
			b, _ := os.ReadFile(l)
			e.t.Logf("----- %s (last lines; full log: %s)\n%s", rel, dst, tail(string(b), 150))
		}
	}
	e.t.Logf("e2e: logs kept in %s", keep)
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		return err
	}
	_, err = io.Copy(out, in)
	return errors.Join(err, out.Close())
}

// unmountUnder unmounts every mount point under dir, deepest first, and
// reports whether any remains. Mounts elsewhere are never touched.
func unmountUnder(t *testing.T, dir string) (left bool) {
	for range 3 {
		mps := mountsUnder(dir)
		if len(mps) == 0 {
			return false
		}
		for _, mp := range mps {
			if err := syscall.Unmount(mp, 0); err != nil {
				if err := syscall.Unmount(mp, syscall.MNT_DETACH); err != nil {
					t.Logf("e2e: unmount %s: %v", mp, err)
				}
			}
		}
	}
	return len(mountsUnder(dir)) > 0
}

// mountsUnder lists the mount points below dir from /proc/self/mountinfo,
// deepest first.
func mountsUnder(dir string) []string {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		m, err := contentv2.ParseMountinfoLine(sc.Text())
		if err != nil {
			continue
		}
		mp := m.MountPoint
		if strings.HasPrefix(mp, dir+"/") {
			out = append(out, mp)
		}
	}
	sort.Slice(out, func(i, j int) bool { return len(out[i]) > len(out[j]) })
	return out
}

// waitFor polls cond every 50 ms until it returns true, fails the test
// after timeout, and gives up at once when it returns an error.
func waitFor(t *testing.T, what string, timeout time.Duration, cond func() (bool, error)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var last error
	for {
		ok, err := cond()
		if ok {
			return
		}
		if err != nil {
			last = err
			var fatal fatalError
			if errors.As(err, &fatal) {
				t.Fatalf("e2e: waiting for %s: %v", what, err)
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("e2e: %s not reached within %v (last error: %v)", what, timeout, last)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// fatalError stops waitFor at once (a daemon died, say).
type fatalError struct{ error }

func dead(p *proc) error {
	return fatalError{fmt.Errorf("%s exited early (%v); see %s", p.name, p.exitErr(), filepath.Base(p.logPath))}
}
