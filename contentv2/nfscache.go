package contentv2

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// NFS's negative lookup cache (docs/design.md §6, "Shared filesystems"): a
// node must see at once a blob another node has just committed. An NFS
// client by default caches a lookup that found nothing (lookupcache=all),
// so a node may answer "not found" for a blob another node has committed
// and download it again, or worse, take it for missing. The mount options
// lookupcache=positive (the kernel shows "pos") or none turn that off.
// The daemon warns at start and `sharedcontentctl doctor` reports a root on
// NFS mounted without them; nothing is refused (the check reads only the
// mount's options, which other kernels or FUSE-based clients show
// differently).

// NegativeLookupCache returns a warning when e is an NFS mount whose
// client caches negative lookups (no lookupcache=positive or none), or ""
// when it is not.
func (e MountEntry) NegativeLookupCache() string {
	if e.FSType != "nfs" && e.FSType != "nfs4" {
		return ""
	}
	for _, opts := range [][]string{e.SuperOptions, e.MountOptions} {
		for _, o := range opts {
			switch o {
			case "lookupcache=pos", "lookupcache=positive", "lookupcache=none":
				return ""
			}
		}
	}
	return fmt.Sprintf("the shared root is on NFS (%s at %s) mounted without lookupcache=positive: the client caches lookups that found nothing, "+
		"so a node may not see a blob another node has just committed; mount it with lookupcache=positive (or none) on every node", e.Source, e.MountPoint)
}

// RootMountWarning returns a warning about the mount of the shared root
// (an NFS mount that caches negative lookups), or "" when there is none
// or the mounts cannot be read (not Linux).
func RootMountWarning(root string) (string, error) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	p, err := filepath.Abs(root)
	if err != nil {
		return "", err
	}
	if p, err = filepath.EvalSymlinks(p); err != nil {
		return "", err
	}
	e, ok := mountOf(string(b), p)
	if !ok {
		return "", nil
	}
	return e.NegativeLookupCache(), nil
}
