package lockserver

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sharedcontent/sharedcontent/lockserver/api"
)

// TestFrozenDeleterUnlockRefused (docs/design.md §8.8, §8.11): a deleter
// confirms its lease, then freezes before its rename (a paused VM); a
// member cut off meanwhile fails open and uses the blob. Whatever the
// lease TTL, the deleter's unlock(success) after that is refused (the
// member is unsynced, or back and synced with its reference), so the
// deleter puts the blob back; the member's reference stays.
//
// Before: the unlock was accepted while the lease lasted (here the
// defaults, 15 s lease and session TTLs), dropping the references.
func TestFrozenDeleterUnlockRefused(t *testing.T) {
	for _, back := range []bool{false, true} {
		name := map[bool]string{false: "member still cut off", true: "member back with its reference"}[back]
		t.Run(name, func(t *testing.T) {
			c := newTestCoordinator(t)
			cfg := DefaultConfig()
			require.NoError(t, cfg.CheckLeaseTTL(), "the defaults")
			clock := useFakeClock(c)
			ctx := context.Background()
			syncedNode(t, c, "n1") // n1's last renewal is sent at 0
			a2 := syncedNode(t, c, "deleter")
			renewDeleter := func(at time.Duration) {
				clock.at(at)
				var err error
				a2, err = c.Session(ctx, sessionReq("deleter", echo(a2, time.Second)))
				require.NoError(t, err)
			}
			renewDeleter(5 * time.Second)
			renewDeleter(10 * time.Second)

			clock.at(14 * time.Second) // n1 is still live and synced
			g, err := c.Lock(ctx, api.LockRequest{Type: api.OperationDelete, ResourceID: blob, NodeID: "deleter", RequestID: "gc"})
			require.NoError(t, err)
			require.True(t, g.Acquired)
			clock.at(14500 * time.Millisecond)
			_, err = c.Keepalive(ctx, api.KeepaliveRequest{Type: api.OperationDelete, ResourceID: blob, NodeID: "deleter", LeaseID: g.LeaseID})
			require.NoError(t, err, "the deleter's last check, right before its rename")

			// The deleter freezes. n1, cut off since 0, fails open at
			// FailOpenDelay and uses the blob; its session lapsed at 15 s.
			failOpen := FailOpenDelay(DefaultSessionTTL)
			renewDeleter(15 * time.Second)
			renewDeleter(20 * time.Second)
			renewDeleter(failOpen)
			if back {
				// n1 comes back and syncs its journal, which holds the blob.
				a, err := c.Session(ctx, sessionReq("n1", nil))
				require.NoError(t, err)
				_, err = c.SyncRefs(ctx, "n1", api.SyncRequest{SyncID: "back", ResourceIDs: []string{blob}, Done: true, Echo: echo(a, 0)})
				require.NoError(t, err)
			}
			clock.at(failOpen + 500*time.Millisecond) // the lease is held until 29.5 s
			// The deleter wakes, renames the blob, and unlocks.
			_, err = c.Unlock(ctx, api.UnlockRequest{Type: api.OperationDelete, ResourceID: blob, NodeID: "deleter", LeaseID: g.LeaseID, Success: true})
			require.Error(t, err, "the unlock after a member failed open")
			if back {
				require.ErrorIs(t, err, api.ErrInUse)
				require.Equal(t, []string{"n1"}, refsOf(t, c, blob), "n1's reference stays")
			} else {
				var unsynced *api.UnsyncedError
				require.ErrorAs(t, err, &unsynced)
				require.Equal(t, []string{"n1"}, unsynced.Nodes)
			}
			st, err := c.Status(ctx, api.OperationDelete, blob, "", "")
			require.NoError(t, err)
			require.Nil(t, st.Holder, "the lease is released")
			require.Nil(t, st.Completed, "no successful completion: the reaper would restore the trash entry")
		})
	}
}
