//go:build unix

package contentv2

import (
	"io/fs"
	"syscall"

	"golang.org/x/sys/unix"
)

// sameFilesystem reports whether a and b are on the same device.
func sameFilesystem(a, b fs.FileInfo) bool {
	sa, ok1 := a.Sys().(*syscall.Stat_t)
	sb, ok2 := b.Sys().(*syscall.Stat_t)
	return !ok1 || !ok2 || sa.Dev == sb.Dev
}

// writable reports why this process cannot write in dir (EROFS on a
// read-only mount), without writing anything.
func writable(dir string) error { return unix.Access(dir, unix.W_OK) }
