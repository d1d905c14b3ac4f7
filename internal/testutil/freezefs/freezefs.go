package freezefs

import (
	"os"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// FS is a mounted passthrough of a backing directory.
type FS struct {
	// Dir is the mountpoint; Backing the directory it passes through to.
	Dir, Backing string

	server *fuse.Server

	mu     sync.Mutex
	thawed chan struct{} // protected by mu; closed while not frozen
	// blocked counts operations waiting in a freeze; changed is closed
	// and replaced whenever it changes. Protected by mu.
	blocked int
	changed chan struct{}
}

// Mount mounts a passthrough of backing at a new directory under the
// test's temporary directory, and unmounts it (thawed) at the test's end.
// The kernel caches no entries or attributes, so that every look-up
// reaches the filesystem and a freeze is seen at once. A test that cannot
// mount (not root, no /dev/fuse, mount refused) is skipped, saying why.
func Mount(t testing.TB, backing string) *FS {
	t.Helper()
	if reason := unavailable(); reason != "" {
		t.Skipf("freezefs: FUSE is not available: %s", reason)
	}
	root, err := fs.NewLoopbackRoot(backing)
	if err != nil {
		t.Fatalf("freezefs: %v", err)
	}
	var zero time.Duration
	f := &FS{Dir: t.TempDir(), Backing: backing, thawed: make(chan struct{}), changed: make(chan struct{})}
	close(f.thawed)
	raw := fs.NewNodeFS(root, &fs.Options{EntryTimeout: &zero, AttrTimeout: &zero, NegativeTimeout: &zero})
	f.server, err = fuse.NewServer(&frozen{RawFileSystem: raw, fs: f}, f.Dir, &fuse.MountOptions{
		FsName:      "freezefs",
		Name:        "freezefs",
		DirectMount: true,
		AllowOther:  true,
	})
	if err != nil {
		t.Skipf("freezefs: FUSE is not available: mounting: %v", err)
	}
	go f.server.Serve()
	if err := f.server.WaitMount(); err != nil {
		t.Fatalf("freezefs: %v", err)
	}
	t.Cleanup(func() {
		f.Thaw()
		if err := f.server.Unmount(); err != nil {
			// Files still open (a test that failed half-way): detach it.
			t.Logf("freezefs: unmounting %s: %v; detaching it", f.Dir, err)
			if err := syscall.Unmount(f.Dir, syscall.MNT_DETACH); err != nil {
				t.Errorf("freezefs: detaching %s: %v", f.Dir, err)
			}
		}
	})
	return f
}

func unavailable() string {
	if os.Geteuid() != 0 {
		return "not running as root"
	}
	if _, err := os.Stat("/dev/fuse"); err != nil {
		return err.Error()
	}
	return ""
}

// Freeze makes every operation on the mount block until Thaw.
func (f *FS) Freeze() {
	f.mu.Lock()
	defer f.mu.Unlock()
	select {
	case <-f.thawed:
		f.thawed = make(chan struct{})
	default:
	}
}

// Thaw lets the blocked operations and every later one through.
func (f *FS) Thaw() {
	f.mu.Lock()
	defer f.mu.Unlock()
	select {
	case <-f.thawed:
	default:
		close(f.thawed)
	}
}

// Blocked is the number of operations waiting in the freeze now.
func (f *FS) Blocked() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.blocked
}

// WaitBlocked waits until at least n operations wait in the freeze, or
// until done is closed; it reports whether they do.
func (f *FS) WaitBlocked(n int, done <-chan struct{}) bool {
	for {
		f.mu.Lock()
		blocked, changed := f.blocked, f.changed
		f.mu.Unlock()
		if blocked >= n {
			return true
		}
		select {
		case <-changed:
		case <-done:
			return false
		}
	}
}

// setBlocked adds d to blocked. The caller holds mu.
func (f *FS) setBlocked(d int) {
	f.blocked += d
	close(f.changed)
	f.changed = make(chan struct{})
}

// gate waits while the mount is frozen, or until the kernel interrupts
// the request.
func (f *FS) gate(cancel <-chan struct{}) {
	f.mu.Lock()
	thawed := f.thawed
	select {
	case <-thawed:
		f.mu.Unlock()
		return
	default:
	}
	f.setBlocked(1)
	f.mu.Unlock()
	select {
	case <-thawed:
	case <-cancel:
	}
	f.mu.Lock()
	f.setBlocked(-1)
	f.mu.Unlock()
}
