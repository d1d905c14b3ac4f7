package freezefs

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestFreezeBlocksUntilThaw: a stat on the mount waits while frozen (the
// filesystem holds it), and returns the backing file's answer once
// thawed.
func TestFreezeBlocksUntilThaw(t *testing.T) {
	backing := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(backing, "f"), []byte("x"), 0o644))
	f := Mount(t, backing)
	b, err := os.ReadFile(filepath.Join(f.Dir, "f"))
	require.NoError(t, err)
	require.Equal(t, "x", string(b))

	f.Freeze()
	done := make(chan error, 1)
	go func() {
		_, err := os.Stat(filepath.Join(f.Dir, "f"))
		done <- err
	}()
	returned := make(chan struct{})
	var err2 error
	go func() { err2 = <-done; close(returned) }()
	require.True(t, f.WaitBlocked(1, returned), "the stat returned while frozen")
	require.Equal(t, 1, f.Blocked())
	f.Thaw()
	<-returned
	require.NoError(t, err2)
}
