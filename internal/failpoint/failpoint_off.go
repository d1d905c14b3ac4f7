//go:build !failpoints

package failpoint

// Inject is a no-op without the build tag `failpoints`.
func Inject(string) {}

// Enabled reports whether this binary was built with failpoints.
const Enabled = false
