package lockserver

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sharedcontent/sharedcontent/lockserver/api"
)

// TestNewMemberUntilSynced: a member made by a session says so
// (NewMember) in every session answer until its sync completes, so a
// node whose first answer was lost still learns it; a forgotten member
// that comes back is new again.
func TestNewMemberUntilSynced(t *testing.T) {
	c := newTestCoordinator(t)
	ctx := context.Background()
	require.True(t, session(t, c, "n1").NewMember)
	require.True(t, session(t, c, "n1").NewMember, "the first answer may have been lost")
	syncRefs(t, c, "n1", "s1", true, blob)
	require.False(t, session(t, c, "n1").NewMember, "synced: no longer new")

	c.mmu.Lock()
	c.members["n1"].sessionUntil = c.now() // lapsed
	c.mmu.Unlock()
	require.NoError(t, c.Forget(ctx, "n1"))
	answers.Delete(nodeKey{c, "n1"})
	back := session(t, c, "n1")
	require.True(t, back.NewMember, "forgotten, it is new again")
	require.False(t, back.Synced)
	require.True(t, session(t, c, "n1").NewMember)
	_, err := c.SyncRefs(ctx, "n1", api.SyncRequest{SyncID: "s2", ResourceIDs: []string{blob}, Done: true, Echo: echoOf(c, "n1")})
	require.NoError(t, err)
	require.False(t, session(t, c, "n1").NewMember)
}
