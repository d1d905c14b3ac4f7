package lockserver

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sharedcontent/sharedcontent/refcount"
)

// TestCommitWaitCalledBeforeWaiting: a reference add under WithCommitWait
// calls its function once its write is ordered, while the commit is still
// held (the HTTP side gives back its slot of new work then,
// docs/design.md §10), and not again.
func TestCommitWaitCalledBeforeWaiting(t *testing.T) {
	store := &heldSubmits{LocalStorage: refcount.NewMemoryStorage(), submitted: make(chan struct{}), open: make(chan struct{})}
	c, err := NewCoordinator(DefaultConfig(), Options{Refs: refcount.NewManager(store)})
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	syncedNode(t, c, "n1")
	waiting := make(chan struct{}, 2)
	ctx := WithCommitWait(context.Background(), func() { waiting <- struct{}{} })
	added := make(chan error, 1)
	go func() {
		_, err := c.AddRef(ctx, blob, "n1")
		added <- err
	}()
	<-store.submitted
	<-waiting // called though the commit is held: else the test hangs
	close(store.open)
	require.NoError(t, <-added)
	require.Empty(t, waiting, "called once")
	require.Equal(t, []string{"n1"}, refsOf(t, c, blob))
}
