//go:build !linux

package contentv2

import (
	"os"
	"path/filepath"
)

// isMountPoint reports whether path is on another device than its parent
// (a bind mount from the same filesystem is not seen).
func isMountPoint(path string) (bool, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return false, err
	}
	pfi, err := os.Stat(filepath.Dir(filepath.Clean(path)))
	if err != nil {
		return false, err
	}
	return !sameFilesystem(fi, pfi), nil
}
