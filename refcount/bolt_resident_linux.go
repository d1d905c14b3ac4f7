package refcount

import (
	"golang.org/x/sys/unix"

	bolt "go.etcd.io/bbolt"
)

// dropResident lets go of the pages of the database file that the
// process has mapped in, in tx (a read transaction: bbolt does not remap
// the file while one is open, so the range is the mapping's). bbolt maps
// the file shared and read-only and writes it with pwrite, so no mapped
// page is ever dirty: MADV_DONTNEED only unmaps them from the process
// (they stay in the page cache, and the next read of one maps it again
// from there). The pages leave the process's resident set (RssFile),
// which otherwise keeps every page a walk of the file read.
func dropResident(db *bolt.DB, tx *bolt.Tx) {
	// A raw syscall: Info gives the mapping's address as a uintptr, and
	// a conversion back to a pointer is what vet rightly flags.
	_, _, _ = unix.Syscall(unix.SYS_MADVISE, db.Info().Data, uintptr(tx.Size()), unix.MADV_DONTNEED)
}
