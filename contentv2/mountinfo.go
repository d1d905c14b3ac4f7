package contentv2

import (
	"fmt"
	"strconv"
	"strings"
)

// /proc/self/mountinfo, read for the shared root's mount: whether it is a
// mount point (mount_linux.go) and with which options (nfscache.go).

// MountEntry is one line of /proc/self/mountinfo: where a filesystem is
// mounted, its type and source, and its per-mount and superblock options
// (the NFS client shows lookupcache among the latter).
type MountEntry struct {
	MountPoint   string
	FSType       string
	Source       string
	MountOptions []string
	SuperOptions []string
}

// ParseMountinfoLine parses one line of /proc/self/mountinfo:
//
//	36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw,errors=continue
//
// (ID, parent ID, device, root, mount point, mount options, optional
// fields, "-", type, source, superblock options).
func ParseMountinfoLine(line string) (MountEntry, error) {
	f := strings.Fields(line)
	sep := -1
	for i := 6; i < len(f); i++ {
		if f[i] == "-" {
			sep = i
			break
		}
	}
	if len(f) < 7 || sep < 0 || sep+2 >= len(f) {
		return MountEntry{}, fmt.Errorf("not a mountinfo line: %q", line)
	}
	return MountEntry{
		MountPoint:   unescapeMountinfo(f[4]),
		FSType:       f[sep+1],
		Source:       unescapeMountinfo(f[sep+2]),
		MountOptions: strings.Split(f[5], ","),
		SuperOptions: superOptions(f, sep),
	}, nil
}

func superOptions(f []string, sep int) []string {
	if sep+3 >= len(f) {
		return nil
	}
	return strings.Split(f[sep+3], ",")
}

// mountOf returns the entry of the filesystem path (absolute, symlinks
// resolved) is on: the last-listed entry with the longest mount point
// that contains path.
func mountOf(mountinfo, path string) (MountEntry, bool) {
	var best MountEntry
	found := false
	for _, line := range strings.Split(mountinfo, "\n") {
		if strings.TrimSpace(line) == "" {
			continue
		}
		e, err := ParseMountinfoLine(line)
		if err != nil || !within(path, e.MountPoint) {
			continue
		}
		if !found || len(e.MountPoint) >= len(best.MountPoint) {
			best, found = e, true
		}
	}
	return best, found
}

func within(path, dir string) bool {
	return path == dir || dir == "/" || strings.HasPrefix(path, dir+"/")
}

// unescapeMountinfo undoes mountinfo's octal escapes (\040 for a space).
func unescapeMountinfo(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var out strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				out.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		out.WriteByte(s[i])
	}
	return out.String()
}
