package members

import (
	"context"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sharedcontent/sharedcontent/lockserver"
	"github.com/sharedcontent/sharedcontent/lockserver/api"
)

// Open opens a session for each node at l and syncs it with the
// references l holds of it (none for a new node), as a node's daemon
// does when it starts, its journal matching them: the node is then live
// and synced, its references unchanged. The coordinator records
// references only for a node with a live session (docs/design.md §8.4),
// and deletes wait for every member that is not synced. The sessions
// last the coordinator's session TTL (no renewal).
func Open(t testing.TB, l *lockserver.Coordinator, nodes ...string) {
	t.Helper()
	ctx := context.Background()
	for _, n := range nodes {
		a, err := l.Session(ctx, api.SessionRequest{NodeID: n})
		require.NoError(t, err)
		_, err = l.SyncRefs(ctx, n, api.SyncRequest{SyncID: "members-" + n, ResourceIDs: refsOf(t, l, n), Done: true,
			Echo: &api.Echo{Epoch: a.Epoch, StampMs: a.StampMs}})
		require.NoError(t, err)
	}
}

// refsOf returns the resources l holds node's references to.
func refsOf(t testing.TB, l *lockserver.Coordinator, node string) []string {
	t.Helper()
	var ids []string
	after := ""
	for {
		page, err := l.RefsList(context.Background(), after, 0)
		require.NoError(t, err)
		for _, e := range page.Entries {
			if slices.Contains(e.Nodes, node) {
				ids = append(ids, e.ResourceID)
			}
		}
		if page.Next == "" {
			return ids
		}
		after = page.Next
	}
}
