package httpserver

import (
	"context"
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/sharedcontent/sharedcontent/lockserver/api"
)

// minFreeBytes is the free space below which a coordinator's data
// directory makes it unready: a write is about to fail, or already did
// while the database could still take a small probe.
const minFreeBytes = 1 << 20

// freeSpaceCheck is a readiness check: unavailable while the filesystem
// of dir has less than minFreeBytes free for the coordinator.
func freeSpaceCheck(dir string) func(context.Context) error {
	return func(context.Context) error {
		var st unix.Statfs_t
		if err := unix.Statfs(dir, &st); err != nil {
			return fmt.Errorf("checking free space of %s: %w: %w", dir, api.ErrUnavailable, err)
		}
		if free := st.Bavail * uint64(st.Bsize); free < minFreeBytes {
			return fmt.Errorf("data directory %s has %d bytes free (less than %d): %w", dir, free, minFreeBytes, api.ErrUnavailable)
		}
		return nil
	}
}
