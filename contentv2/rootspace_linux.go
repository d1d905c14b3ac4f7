package contentv2

import "golang.org/x/sys/unix"

// statRoot returns the size of the filesystem holding path and the bytes
// available on it to an unprivileged writer (what df calls Avail).
func statRoot(path string) (space, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return space{}, err
	}
	bs := uint64(st.Bsize)
	return space{size: st.Blocks * bs, free: st.Bavail * bs}, nil
}
