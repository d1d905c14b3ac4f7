package hostinstall

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/containerd/errdefs"
)

// writeFile makes path hold content with mode, atomically (a temporary
// file in the same directory, synced, then renamed over path: a reader,
// or a running binary, sees the old file or the new one, never a part),
// creating its directory (0755). It writes nothing, and reports false,
// when path already holds content with mode.
func writeFile(path string, content []byte, mode fs.FileMode) (bool, error) {
	if st, err := os.Stat(path); err == nil && st.Mode().Perm() == mode {
		old, err := os.ReadFile(path)
		if err == nil && bytes.Equal(old, content) {
			return false, nil
		}
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return false, err
	}
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return false, err
	}
	done := false
	defer func() {
		if !done {
			_ = tmp.Close()
			_ = os.Remove(tmp.Name())
		}
	}()
	if _, err := tmp.Write(content); err != nil {
		return false, err
	}
	if err := tmp.Chmod(mode); err != nil {
		return false, err
	}
	if err := tmp.Sync(); err != nil {
		return false, err
	}
	if err := tmp.Close(); err != nil {
		return false, err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return false, err
	}
	done = true
	return true, syncDir(dir)
}

// removeFile removes path; it reports whether there was one.
func removeFile(path string) (bool, error) {
	err := os.Remove(path)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return true, syncDir(filepath.Dir(path))
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	return nil
}

// ownedOrAbsent refuses a file at path that this installer did not write
// (it lacks installedMarker): an operator's own unit or drop-in is theirs.
func ownedOrAbsent(path string) error {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if !bytes.HasPrefix(b, []byte(installedMarker)) {
		return fmt.Errorf("%s exists and was not written by containerd-sharedcontent install: remove it before installing (or keep it and run the daemon without the installer): %w", path, errdefs.ErrFailedPrecondition)
	}
	return nil
}
