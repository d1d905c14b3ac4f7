package coordinatortest

import (
	"testing"
	"time"

	"github.com/containerd/errdefs"
	"github.com/stretchr/testify/require"

	"github.com/sharedcontent/sharedcontent/contentv2"
	"github.com/sharedcontent/sharedcontent/lockserver/api"
)

// testMembers: every node that opened a session is a member, in node ID
// order, live while its session is, and still a member once it ended.
func testMembers(t *testing.T, c Cluster) {
	ctx := t.Context()
	n1, n2 := c.Node(t, "node-1"), c.Node(t, "node-2")
	join(t, n2, "i2")
	join(t, n1, "i1")
	ms, err := n1.Members(ctx)
	require.NoError(t, err)
	require.Equal(t, []contentv2.MemberInfo{{ID: "node-1", Live: true}, {ID: "node-2", Live: true}}, ms.Nodes)

	ended, err := n2.EndSession(ctx, "i2")
	require.NoError(t, err)
	require.True(t, ended)
	ms, err = n1.Members(ctx)
	require.NoError(t, err)
	require.Len(t, ms.Nodes, 2)
	require.Equal(t, "node-2", ms.Nodes[1].ID)
	require.False(t, ms.Nodes[1].Live, "an ended session")
}

// testExpireMember: only the reap lock expires a member
// (errdefs.ErrInvalidArgument with another), and a live member is
// ErrNotExpired and stays.
func testExpireMember(t *testing.T, c Cluster) {
	ctx := t.Context()
	n1 := c.Node(t, "node-1")
	join(t, n1, "i1")
	join(t, c.Node(t, "node-2"), "i2")
	marker := contentv2.MarkerReport{State: "s", Unchanged: time.Hour}

	other := lock(t, n1, api.LockRequest{Type: api.OperationUpdate, ResourceID: blob(1).String(), Wait: new(false)})
	_, err := n1.ExpireMember(ctx, other, "node-2", marker)
	require.ErrorIs(t, err, errdefs.ErrInvalidArgument, "not the reap lock")
	require.NoError(t, other.Unlock(ctx, true, nil))

	reap := lock(t, n1, reapLock())
	_, err = n1.ExpireMember(ctx, reap, "node-2", marker)
	require.ErrorIs(t, err, api.ErrNotExpired, "node-2 is live")
	ms, err := n1.Members(ctx)
	require.NoError(t, err)
	require.Len(t, ms.Nodes, 2, "node-2 stays")
	require.NoError(t, reap.Unlock(ctx, true, nil))
}
