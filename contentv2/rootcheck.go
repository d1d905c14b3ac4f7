package contentv2

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/containerd/errdefs"
)

// rootSubdirs are the directories under the shared root between which
// the store renames files: an ingest is committed by a rename from
// ingest/ into blobs/<alg>/, and a blob is deleted by a rename into
// .trash/. A rename cannot cross filesystems, so each of them that exists
// must be on the root's filesystem.
var rootSubdirs = []string{"ingest", "blobs", filepath.Join("blobs", "sha256"), TrashDir}

// CheckRoot checks that root can serve as a store's shared root (docs/design.md §6):
// a directory (created, with its parents, when missing), in which this
// process can create, rename and remove a file, with its ingest, blob and
// trash directories on the same filesystem. NewStore runs it; a daemon may
// run it earlier to refuse to start before it does anything else.
//
// The error matches errdefs.ErrFailedPrecondition and names the path and
// what to fix.
func CheckRoot(root string) error {
	if root == "" {
		return fmt.Errorf("the shared root is empty; set it (--root) to a directory on the shared storage: %w", errdefs.ErrFailedPrecondition)
	}
	fi, err := os.Stat(root)
	if errors.Is(err, fs.ErrNotExist) {
		if err = os.MkdirAll(root, 0o755); err == nil {
			fi, err = os.Stat(root)
		}
	}
	switch {
	case err != nil:
		return rootError(root, "cannot be created or read", "check that its parent exists, is a directory and is mounted", err)
	case !fi.IsDir():
		return rootError(root, fmt.Sprintf("is not a directory (it is a %s)", fileKind(fi.Mode())),
			"point the root (--root) at a directory on the shared storage", nil)
	}
	if err := checkRename(root); err != nil {
		return err
	}
	for _, sub := range rootSubdirs {
		p := filepath.Join(root, sub)
		sfi, err := os.Stat(p)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return rootError(root, "cannot be read", "check "+p, err)
		}
		if !sameFilesystem(fi, sfi) {
			return rootError(root, "spans filesystems: "+p+" is on another one, and the store renames files between them",
				"unmount "+p+", or mount the whole root as one filesystem", nil)
		}
	}
	return nil
}

// checkRename creates a file in root, renames it and removes it.
func checkRename(root string) error {
	f, err := os.CreateTemp(root, ".rootcheck-*")
	if err != nil {
		return rootError(root, "is not writable", "make it writable by this process's user, and check that it is not mounted read-only", err)
	}
	name := f.Name()
	cerr := f.Close()
	renamed := name + ".renamed"
	if err := errors.Join(cerr, os.Rename(name, renamed)); err != nil {
		os.Remove(name)
		return rootError(root, "does not support rename", "use a filesystem that supports rename(2) (NFS, CephFS and local filesystems do)", err)
	}
	if err := os.Remove(renamed); err != nil {
		return rootError(root, "does not let files be removed", "make it writable by this process's user", err)
	}
	return nil
}

func rootError(root, what, fix string, cause error) error {
	if cause != nil {
		return fmt.Errorf("shared root %s %s (%v); %s: %w", root, what, cause, fix, errdefs.ErrFailedPrecondition)
	}
	return fmt.Errorf("shared root %s %s; %s: %w", root, what, fix, errdefs.ErrFailedPrecondition)
}

func fileKind(m fs.FileMode) string {
	switch {
	case m.IsRegular():
		return "regular file"
	case m&fs.ModeSymlink != 0:
		return "symbolic link"
	case m&fs.ModeSocket != 0:
		return "socket"
	case m&fs.ModeNamedPipe != 0:
		return "named pipe"
	case m&fs.ModeDevice != 0:
		return "device"
	}
	return "file of mode " + m.String()
}
