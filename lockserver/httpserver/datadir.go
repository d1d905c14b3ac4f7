package httpserver

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
)

// checkDataDir makes sure dir can hold the database: a directory (created,
// with its parents, when missing) in which this process can create and
// remove a file. The error names the path and what to fix.
func checkDataDir(dir string) error {
	fi, err := os.Stat(dir)
	if errors.Is(err, fs.ErrNotExist) {
		if err = os.MkdirAll(dir, 0o700); err == nil {
			fi, err = os.Stat(dir)
		}
	}
	if err != nil {
		return fmt.Errorf("lockserver: data dir %s cannot be created or read (%w); check that its parent exists and is a directory (--data-dir)", dir, err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("lockserver: data dir %s is not a directory (its mode is %s); point --data-dir at a directory on local disk", dir, fi.Mode())
	}
	f, err := os.CreateTemp(dir, ".datadircheck-*")
	if err != nil {
		return fmt.Errorf("lockserver: data dir %s is not writable (%w); make it writable by this process's user, and check that it is not mounted read-only (--data-dir)", dir, err)
	}
	return errors.Join(f.Close(), os.Remove(f.Name()))
}
