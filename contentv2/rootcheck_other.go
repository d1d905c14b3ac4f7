//go:build !unix

package contentv2

import "io/fs"

// sameFilesystem cannot tell here; a rename across filesystems fails at
// the first commit instead.
func sameFilesystem(a, b fs.FileInfo) bool { return true }

// writable cannot tell here without writing; a write fails instead.
func writable(dir string) error { return nil }
