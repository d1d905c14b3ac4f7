package lockserver

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sharedcontent/sharedcontent/lockserver/api"
	"github.com/sharedcontent/sharedcontent/refcount"
)

// TestLastSeenWrittenAtShutdown: a new member's record is written at its
// first session; later sessions write nothing (no fsync per node per
// minute), GET /nodes shows the last one all the same, and a clean
// shutdown writes it.
func TestLastSeenWrittenAtShutdown(t *testing.T) {
	ctx := context.Background()
	store := refcount.NewMemoryStorage()
	c, err := NewCoordinator(DefaultConfig(), Options{Refs: refcount.NewManager(store)})
	require.NoError(t, err)
	clock := useFakeClock(c)
	persisted := func() refcount.Member {
		t.Helper()
		ms, err := store.ListMembers(ctx)
		require.NoError(t, err)
		require.Len(t, ms, 1)
		return ms[0]
	}

	clock.at(time.Second)
	session(t, c, "n1")
	first := c.now()
	require.True(t, persisted().LastSeen.Equal(first), "a new member is written at once")

	clock.at(time.Hour)
	_, err = c.Session(ctx, api.SessionRequest{NodeID: "n1"}) // a new session, not a late renewal
	require.NoError(t, err)
	last := c.now()
	require.True(t, persisted().LastSeen.Equal(first), "a renewal writes nothing")

	clock.at(time.Hour + 2*DefaultConfig().SessionTTL)
	nodes, err := c.Nodes(ctx)
	require.NoError(t, err)
	require.False(t, nodes.Nodes[0].Live)
	require.Equal(t, last.UTC().Format(time.RFC3339Nano), nodes.Nodes[0].LastSeen, "GET /nodes shows the last session")

	require.NoError(t, c.Close())
	require.True(t, persisted().LastSeen.Equal(last), "a clean shutdown writes the last session")
}
