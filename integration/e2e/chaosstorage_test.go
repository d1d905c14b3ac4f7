package e2e

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/sharedcontent/sharedcontent/internal/testutil/freezefs"
)

// chaosStorageFaults are the storage fault kinds of TestChaosReal (and
// TestChaosRealHA). They need each node's shared root to be a view of its
// own (chaosStorage), so they run only when chosen: by name, or with "all"
// (`make chaos`'s default); the short run of `make e2e` leaves them out.
var chaosStorageFaults = []string{
	"unmount",   // a node's view of the shared root lazily unmounted (umount -l: a stale mount), mounted again 3–20 s later
	"read-only", // a node's view remounted read-only, read-write again 3–20 s later
	"fill",      // the shared filesystem (a size-limited tmpfs) filled to its last block, freed 3–20 s later
	"freeze",    // a node's view (a FUSE passthrough) frozen: every call on it blocks, thawed 3–20 s later
}

const (
	// chaosDiskSize is the size of the tmpfs holding the shared root when
	// "fill" is chosen: many times what the images need (5 layers of
	// chaosLayer, partial ingests, the trash), small enough to fill fast.
	chaosDiskSize = 64 << 20
	// chaosStorageTimeout is the plugins' --storage-timeout when "freeze"
	// is chosen: a frozen root fails a call after it, not after the
	// default 30 s, so that the invariant checks go on.
	chaosStorageTimeout = 2 * time.Second
)

// chaosStorage is the storage under TestChaosReal's nodes when storage
// faults are chosen:
//
//	disk/           a tmpfs of chaosDiskSize ("fill" only; else shared/ is on the test's disk)
//	disk/shared/    the shared root (realChaos.c.shared: what the checks read)
//	disk/fill       the file that fills it
//	(FUSE mount)    node i's freezefs passthrough of shared/ ("freeze" only)
//	v1/ v2/ v3/     node i's view: a bind mount of shared/ (or of its FUSE mount); its --root
//
// The checks of the invariant read the shared root itself, never a view.
// On GlusterFS (chaosGluster) the shared root is a mount of the volume of
// its own, and each view is the node's own mount of it.
type chaosStorage struct {
	disk, shared string
	views        []string       // node i's --root
	sources      []string       // what node i's view binds; nil on GlusterFS
	fuse         []*freezefs.FS // node i's FUSE passthrough; nil without "freeze" or on GlusterFS
	gluster      *chaosGluster  // the volume; nil on the test's disk
}

// usesStorage reports whether kinds hold a storage fault.
func usesStorage(kinds []string) bool {
	return slices.ContainsFunc(kinds, func(k string) bool {
		return slices.Contains(chaosStorageFaults, k) || slices.Contains(chaosGlusterFaults, k)
	})
}

// newChaosStorage builds the storage of three nodes under e for kinds: on
// GlusterFS when glusterfs (newChaosGluster), else views of a directory.
func newChaosStorage(t *testing.T, e *env, kinds []string, glusterfs bool) *chaosStorage {
	t.Helper()
	s := &chaosStorage{shared: e.path("shared")}
	if glusterfs {
		newChaosGluster(t, e, kinds, s)
		return s
	}
	if slices.Contains(kinds, "fill") {
		s.disk = e.path("disk")
		mustNoErr(t, os.MkdirAll(s.disk, 0o755))
		mustNoErr(t, syscall.Mount("tmpfs", s.disk, "tmpfs", 0, fmt.Sprintf("size=%d,mode=0755", chaosDiskSize)))
		s.shared = filepath.Join(s.disk, "shared")
	}
	mustNoErr(t, os.MkdirAll(s.shared, 0o755))
	for i := range 3 {
		src := s.shared
		if slices.Contains(kinds, "freeze") {
			fs := freezefs.Mount(t, s.shared)
			s.fuse = append(s.fuse, fs)
			src = fs.Dir
		}
		view := e.path(fmt.Sprintf("v%d", i+1))
		mustNoErr(t, os.MkdirAll(view, 0o755))
		mustNoErr(t, syscall.Mount(src, view, "", syscall.MS_BIND, ""))
		s.views = append(s.views, view)
		s.sources = append(s.sources, src)
	}
	// Thawed before anything stops (a frozen mount would hang the
	// nodes' stop and the unmounts).
	e.onCleanup(s.thawAll)
	// freezefs unmounts its mount in a cleanup of its own, which runs
	// before the environment's and waits for every user of the FUSE
	// connection to go: the nodes must have stopped and the views
	// be unmounted by then.
	t.Cleanup(func() {
		s.thawAll()
		e.stopAll()
		for _, v := range s.views {
			if err := syscall.Unmount(v, 0); err != nil {
				if err := syscall.Unmount(v, syscall.MNT_DETACH); err != nil {
					t.Logf("chaos storage: unmount %s: %v", v, err)
				}
			}
		}
	})
	return s
}

func mustNoErr(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("chaos storage: %v", err)
	}
}

func (s *chaosStorage) thawAll() {
	for _, fs := range s.fuse {
		fs.Thaw()
	}
}

// storageFault applies one storage fault to p.n's view (or the shared
// filesystem) for p.hold, then heals it. The node keeps operating: what
// it does meanwhile is what the fault tests. On GlusterFS a view is the
// node's own FUSE mount of the volume: it is unmounted (and mounted again)
// itself, and frozen by stopping its client process.
func (ch *realChaos) storageFault(kind string, p faultPlan) {
	s, i := ch.storage, p.n.index
	switch kind {
	case "unmount":
		ch.must(syscall.Unmount(s.views[i], syscall.MNT_DETACH), "umount -l %s", s.views[i])
		time.Sleep(p.hold)
		if s.gluster != nil {
			ch.must(s.gluster.remount(s, i), "mount again")
			return
		}
		ch.must(syscall.Mount(s.sources[i], s.views[i], "", syscall.MS_BIND, ""), "mount --bind %s %s", s.sources[i], s.views[i])
	case "read-only":
		ch.must(remountReadOnly(s.views[i]), "remount ro %s", s.views[i])
		time.Sleep(p.hold)
		ch.must(syscall.Mount("", s.views[i], "", syscall.MS_REMOUNT|syscall.MS_BIND, ""), "remount rw %s", s.views[i])
	case "fill":
		f := filepath.Join(s.disk, "fill")
		n, err := fillFile(f)
		ch.must(err, "fill %s", f)
		ch.t.Logf("chaos: shared filesystem filled (%d MiB written)", n>>20)
		time.Sleep(p.hold)
		ch.must(os.Remove(f), "free %s", f)
	case "freeze":
		if s.gluster != nil {
			pid, err := s.gluster.freeze(s, i)
			ch.must(err, "kill -STOP the glusterfs client of %s", s.views[i])
			ch.t.Logf("chaos: %s's glusterfs client (pid %d) stopped", p.n.id, pid)
			time.Sleep(p.hold)
			ch.must(syscall.Kill(pid, syscall.SIGCONT), "kill -CONT %d", pid)
			return
		}
		s.fuse[i].Freeze()
		time.Sleep(p.hold)
		ch.t.Logf("chaos: %d calls on %s's root blocked when thawed", s.fuse[i].Blocked(), p.n.id)
		s.fuse[i].Thaw()
	}
}

// remountReadOnly remounts the mount at mp read-only (`mount -o
// remount,bind,ro`). The kernel refuses that (EBUSY) while a file on the
// mount is open for writing, as a node's ingest is while it pulls, so it
// tries again every 50 ms until it succeeds or for a minute.
func remountReadOnly(mp string) error {
	deadline := time.Now().Add(time.Minute)
	for {
		err := syscall.Mount("", mp, "", syscall.MS_REMOUNT|syscall.MS_BIND|syscall.MS_RDONLY, "")
		if !errors.Is(err, syscall.EBUSY) || time.Now().After(deadline) {
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// must stops the test when the harness itself cannot inject or heal a
// fault.
func (ch *realChaos) must(err error, format string, args ...any) {
	if err != nil {
		ch.t.Fatalf("chaos: %s: %v", fmt.Sprintf(format, args...), err)
	}
}

// fillFile writes name until its filesystem is full (ENOSPC on a 4 KiB
// write), and returns how much it wrote.
func fillFile(name string) (int64, error) {
	f, err := os.OpenFile(name, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	var total int64
	for _, size := range []int{1 << 20, 4 << 10} {
		buf := make([]byte, size)
		for {
			n, err := f.Write(buf)
			total += int64(n)
			if errors.Is(err, syscall.ENOSPC) {
				break
			}
			if err != nil {
				return total, err
			}
		}
	}
	return total, nil
}

// restartAll stops every node (containerd, then its plugin) and starts it
// again: after storage faults, a node must read back everything its
// containerd lists also after a restart.
func (ch *realChaos) restartAll() {
	for _, n := range ch.nodes {
		n.setDown()
		n.containerd.stop(stopGrace)
		n.plugin.stop(stopGrace)
		n.startPlugin()
		n.startContainerd(n.config(true))
		n.setUp()
	}
}
