//go:build !linux

package contentv2

import (
	"fmt"

	"github.com/containerd/errdefs"
)

// statRoot is not implemented here: the root's space series are absent.
func statRoot(path string) (space, error) {
	return space{}, fmt.Errorf("statfs %s: %w", path, errdefs.ErrNotImplemented)
}
