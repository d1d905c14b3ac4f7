package coordinatortest

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sharedcontent/sharedcontent/contentv2"
	"github.com/sharedcontent/sharedcontent/lockserver/api"
)

// testDeleteInUse: a delete first drops the requester's own reference,
// then is ErrInUse while another node references the blob
// (docs/design.md §8.7); the other's reference stays.
func testDeleteInUse(t *testing.T, c Cluster) {
	n1, n2 := c.Node(t, "node-1"), c.Node(t, "node-2")
	join(t, n1, "i1", blob(1))
	join(t, n2, "i2", blob(1))

	_, err := n1.Lock(t.Context(), del(blob(1)))
	require.ErrorIs(t, err, api.ErrInUse)
	require.Equal(t, map[string][]string{blob(1).String(): {"node-2"}}, refs(t, n1), "node-1's reference is gone")
}

// testDeleteUnsynced: a delete is ErrUnsynced while a member has not
// synced in its session, and again once a member ended its session.
func testDeleteUnsynced(t *testing.T, c Cluster) {
	ctx := t.Context()
	n1, n2 := c.Node(t, "node-1"), c.Node(t, "node-2")
	join(t, n1, "i1")
	info := open(t, n2, "i2")
	_, err := n1.Lock(ctx, del(blob(1)))
	require.ErrorIs(t, err, api.ErrUnsynced, "node-2 has not synced")

	require.NoError(t, sync(ctx, n2, info, "gen-i2"))
	require.NoError(t, lock(t, n1, del(blob(1))).Unlock(ctx, false, nil))

	ended, err := n2.EndSession(ctx, "i2")
	require.NoError(t, err)
	require.True(t, ended)
	_, err = n1.Lock(ctx, del(blob(2)))
	require.ErrorIs(t, err, api.ErrUnsynced, "an ended session leaves its node unsynced")
}

// testDeleteCompletion: a delete's success drops the blob's references
// and is retained with its fence; a delete after it is ErrSkipped, a pull
// after it is not (the blob is gone); a failed delete retains nothing.
func testDeleteCompletion(t *testing.T, c Cluster) {
	ctx := t.Context()
	ns := members(t, c, 2)
	n1, n2 := ns[0], ns[1]

	dc, err := n1.DeleteCompletion(ctx, blob(1))
	require.NoError(t, err)
	require.False(t, dc.Done, "no delete yet")

	p := lock(t, n2, pull(blob(1)))
	require.NoError(t, p.Unlock(ctx, true, nil))
	_, err = n2.Lock(ctx, del(blob(1)))
	require.NoError(t, err, "node-2's own delete drops its own reference")
	// The grant above holds the delete; the answer to another is Locked.
	_, err = n1.Lock(ctx, del(blob(1)))
	require.ErrorIs(t, err, api.ErrLocked)
	dc, err = n1.DeleteCompletion(ctx, blob(1))
	require.NoError(t, err)
	require.False(t, dc.Done, "held, not yet done")

	require.NoError(t, lock(t, n1, del(blob(2))).Unlock(ctx, false, nil))
	dc, err = n1.DeleteCompletion(ctx, blob(2))
	require.NoError(t, err)
	require.False(t, dc.Done, "a failed delete is not a completion")

	d := lock(t, n1, del(blob(3)))
	require.NoError(t, d.Unlock(ctx, true, nil))
	dc, err = n2.DeleteCompletion(ctx, blob(3))
	require.NoError(t, err)
	require.Equal(t, contentv2.DeleteCompletion{Done: true, Fence: d.Fence()}, dc)
	_, err = n2.Lock(ctx, del(blob(3)))
	require.ErrorIs(t, err, api.ErrSkipped, "deleted just now")
	require.NoError(t, lock(t, n2, pull(blob(3))).Unlock(ctx, false, nil), "a pull after a delete downloads")
}

// testReapDelete: a reap delete needs the reap lock (ErrForbidden
// without it); a dangling reap drops the reaper's own reference only and
// is ErrInUse while another node's stays; an orphan reap is ErrInUse
// while any node, the reaper included, references the blob.
func testReapDelete(t *testing.T, c Cluster) {
	ctx := t.Context()
	n1, n2 := c.Node(t, "node-1"), c.Node(t, "node-2")
	join(t, n1, "i1", blob(1), blob(2), blob(3))
	join(t, n2, "i2", blob(2))
	dangling := func(i int) api.LockRequest {
		r := del(blob(i))
		r.Reap = api.ReapDangling
		return r
	}

	_, err := n1.Lock(ctx, dangling(1))
	require.ErrorIs(t, err, api.ErrForbidden, "without the reap lock")
	require.Contains(t, refs(t, n1), blob(1).String(), "a refused reap keeps the reaper's reference")

	reap := lock(t, n1, reapLock())
	d := lock(t, n1, dangling(1))
	require.NoError(t, d.Unlock(ctx, true, nil))
	_, err = n1.Lock(ctx, dangling(2))
	require.ErrorIs(t, err, api.ErrInUse, "node-2's reference")
	orphan := del(blob(3))
	orphan.Reap = api.ReapOrphan
	_, err = n1.Lock(ctx, orphan)
	require.ErrorIs(t, err, api.ErrInUse, "the reaper's own reference")
	require.Equal(t, map[string][]string{
		blob(2).String(): {"node-1", "node-2"},
		blob(3).String(): {"node-1"},
	}, refs(t, n1), "a reap delete leaves the reaper's references but the dangling one it reaped")
	require.NoError(t, reap.Unlock(ctx, true, nil))
}

// testReapAfterDelete: a delete's success answers a later delete of the
// blob with ErrSkipped, but not the reaper's orphan delete: the reaper has
// just listed the blob's file, so the blob is back (a node that failed
// open wrote it again) and the old success is no answer.
func testReapAfterDelete(t *testing.T, c Cluster) {
	ctx := t.Context()
	n1, n2 := c.Node(t, "node-1"), c.Node(t, "node-2")
	join(t, n1, "i1")
	join(t, n2, "i2")
	require.NoError(t, lock(t, n1, del(blob(1))).Unlock(ctx, true, nil))
	_, err := n2.Lock(ctx, del(blob(1)))
	require.ErrorIs(t, err, api.ErrSkipped, "a node's own delete after the success")

	reap := lock(t, n2, reapLock())
	orphan := del(blob(1))
	orphan.Reap = api.ReapOrphan
	require.NoError(t, lock(t, n2, orphan).Unlock(ctx, true, nil), "the reaper's orphan delete is granted")
	require.NoError(t, reap.Unlock(ctx, true, nil))
}
