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
	l := newTestCoordinator(t)
	ctx := context.Background()
	require.True(t, session(t, l, "n1").NewMember)
	require.True(t, session(t, l, "n1").NewMember, "the first answer may have been lost")
	syncRefs(t, l, "n1", "s1", true, blob)
	require.False(t, session(t, l, "n1").NewMember, "synced: no longer new")

	l.mmu.Lock()
	l.members["n1"].sessionUntil = l.now() // lapsed
	l.mmu.Unlock()
	require.NoError(t, l.Forget(ctx, "n1"))
	answers.Delete(nodeKey{l, "n1"})
	back := session(t, l, "n1")
	require.True(t, back.NewMember, "forgotten, it is new again")
	require.False(t, back.Synced)
	require.True(t, session(t, l, "n1").NewMember)
	_, err := l.SyncRefs(ctx, "n1", api.SyncRequest{SyncID: "s2", ResourceIDs: []string{blob}, Done: true, Echo: echoOf(l, "n1")})
	require.NoError(t, err)
	require.False(t, session(t, l, "n1").NewMember)
}
