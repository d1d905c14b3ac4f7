package httpserver

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/containerd/errdefs"
	"golang.org/x/sys/unix"
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

// dataDirError is the error of opening the database in dir: when another
// process holds it (refcount.OpenBoltStorage waited for its lock in
// vain), one that says another coordinator uses the data dir, naming its
// process when /proc/locks tells it.
func dataDirError(dir string, err error) error {
	if !errdefs.IsUnavailable(err) {
		return fmt.Errorf("lockserver: %w", err)
	}
	holder := "another coordinator"
	if pid := lockHolder(filepath.Join(dir, DBFile)); pid > 0 {
		holder = fmt.Sprintf("another coordinator (pid %d)", pid)
	}
	return fmt.Errorf("lockserver: %s holds data dir %s: only one coordinator may use a data dir; "+
		"stop that one, or give this one its own --data-dir: %w", holder, dir, err)
}

// lockHolder returns the process that holds a lock on the file at path,
// as /proc/locks shows it, or 0 when it is not known (no such lock, not
// Linux, a process of another PID namespace).
func lockHolder(path string) int {
	var st unix.Stat_t
	if unix.Stat(path, &st) != nil {
		return 0
	}
	b, err := os.ReadFile("/proc/locks")
	if err != nil {
		return 0
	}
	dev := uint64(st.Dev) //nolint:unconvert // not a uint64 on every platform
	file := fmt.Sprintf("%02x:%02x:%d", unix.Major(dev), unix.Minor(dev), st.Ino)
	for line := range strings.Lines(string(b)) {
		// "1: FLOCK  ADVISORY  WRITE 3043 fe:00:9982021 0 EOF"; a waiter's
		// line has "->" after the number.
		f := strings.Fields(line)
		if len(f) < 6 || f[1] == "->" || f[5] != file {
			continue
		}
		if pid, err := strconv.Atoi(f[4]); err == nil {
			return pid
		}
	}
	return 0
}
