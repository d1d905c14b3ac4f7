//go:build unix

package contentv2

import (
	"io/fs"
	"syscall"
)

// sameFilesystem reports whether a and b are on the same device.
func sameFilesystem(a, b fs.FileInfo) bool {
	sa, ok1 := a.Sys().(*syscall.Stat_t)
	sb, ok2 := b.Sys().(*syscall.Stat_t)
	return !ok1 || !ok2 || sa.Dev == sb.Dev
}
