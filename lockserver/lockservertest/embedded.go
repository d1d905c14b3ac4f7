package lockservertest

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sharedcontent/sharedcontent/lockserver"
	"github.com/sharedcontent/sharedcontent/refcount"
)

// NewCoordinator returns an in-process coordinator (the embedded mode) with
// in-memory references, lockserver.DefaultConfig changed by mutate. It is
// closed when the test ends; a Close error fails the test.
func NewCoordinator(t testing.TB, mutate ...func(*lockserver.Config)) *lockserver.Coordinator {
	t.Helper()
	cfg := lockserver.DefaultConfig()
	for _, m := range mutate {
		m(&cfg)
	}
	refs := refcount.NewManager(refcount.NewMemoryStorage())
	l, err := lockserver.NewCoordinator(cfg, lockserver.Options{Refs: refs})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, l.Close()) })
	return l
}
