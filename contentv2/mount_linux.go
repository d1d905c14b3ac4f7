package contentv2

import (
	"bufio"
	"bytes"
	"os"
	"path/filepath"
	"strings"
)

// isMountPoint reports whether path is a mount point: listed as one in
// /proc/self/mountinfo (which, unlike comparing devices with the parent,
// also sees a bind mount from the same filesystem).
func isMountPoint(path string) (bool, error) {
	p, err := filepath.Abs(path)
	if err != nil {
		return false, err
	}
	if p, err = filepath.EvalSymlinks(p); err != nil {
		return false, err
	}
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return false, err
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		// ID parent major:minor root mount-point options ...
		f := strings.Fields(sc.Text())
		if len(f) > 4 && unescapeMountinfo(f[4]) == p {
			return true, nil
		}
	}
	return false, sc.Err()
}
