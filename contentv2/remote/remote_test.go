package remote_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/containerd/errdefs"
	"github.com/opencontainers/go-digest"
	"github.com/stretchr/testify/require"

	"github.com/sharedcontent/sharedcontent/contentv2"
	"github.com/sharedcontent/sharedcontent/contentv2/remote"
	"github.com/sharedcontent/sharedcontent/lockclient"
	"github.com/sharedcontent/sharedcontent/lockserver"
	"github.com/sharedcontent/sharedcontent/lockserver/api"
	"github.com/sharedcontent/sharedcontent/lockserver/lockservertest"
)

// sessionTTL is the coordinator's session TTL in these tests: long, so
// that no renewal or sync of a test counts as late on a loaded machine
// (one minute was not: a renewal came 34 s after its answer under load).
const sessionTTL = 10 * time.Minute

// TestReapLockResource: contentv2 names the reap lock itself; the
// coordinator must know it by the same name.
func TestReapLockResource(t *testing.T) {
	require.Equal(t, api.ReapLockResource, api.ReapLockResource)
}

// start starts a real coordinator over loopback HTTP.
func start(t *testing.T) *lockservertest.Server {
	cfg := lockserver.DefaultConfig()
	cfg.SessionTTL = sessionTTL
	return lockservertest.Start(t, lockservertest.WithConfig(cfg))
}

// node returns the coordinator as node id sees it through remote.New.
func node(t *testing.T, coord *lockservertest.Server, id string) contentv2.Coordinator {
	t.Helper()
	c, err := lockclient.New(coord.URL(), lockclient.WithNodeID(id))
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	return remote.New(c)
}

// join opens a session of instance and syncs refs in it: the node is
// then a synced member.
func join(t *testing.T, c contentv2.Coordinator, instance string, refs ...digest.Digest) contentv2.SessionInfo {
	t.Helper()
	ctx := context.Background()
	info, err := c.Session(ctx, contentv2.SessionRequest{InstanceID: instance})
	require.NoError(t, err)
	require.NoError(t, c.SyncRefs(ctx, contentv2.SyncRequest{Generation: "gen-" + instance,
		Snapshot: func() ([]digest.Digest, error) { return refs, nil },
		Echo:     func() *contentv2.Echo { return &contentv2.Echo{Epoch: info.Epoch, Stamp: info.Stamp} }}))
	return info
}

func blobDigest(i int) digest.Digest { return digest.FromString(fmt.Sprintf("blob %d", i)) }

// TestSessionAndSync: a session answer comes back in contentv2's terms;
// a journal longer than one sync chunk reaches the coordinator whole (the
// sync is announced before the snapshot is taken), Refs walks all of it
// (lockclient's tests walk many pages) and stops at fn's error, and the
// renewal that follows finds the node synced.
func TestSessionAndSync(t *testing.T) {
	ctx := context.Background()
	coord := start(t)
	c := node(t, coord, "node-1")
	cluster := coord.Core().Cluster()

	info, err := c.Session(ctx, contentv2.SessionRequest{ClusterID: cluster.ClusterID, InstanceID: "instance-1"})
	require.NoError(t, err)
	require.Equal(t, contentv2.SessionInfo{ClusterID: cluster.ClusterID, Epoch: cluster.Epoch, TTL: sessionTTL,
		Stamp: info.Stamp, NewMember: true}, info, "an opened session starts unsynced")

	refs := make([]digest.Digest, api.MaxSyncChunk+3)
	for i := range refs {
		refs[i] = blobDigest(i)
	}
	var announced bool
	err = c.SyncRefs(ctx, contentv2.SyncRequest{Generation: "gen-1",
		Snapshot: func() ([]digest.Digest, error) {
			nodes, err := coord.Core().Nodes(ctx)
			require.NoError(t, err)
			announced = len(nodes.Nodes) == 1 && nodes.Nodes[0].NodeID == "node-1"
			return refs, nil
		},
		Echo: func() *contentv2.Echo { return &contentv2.Echo{Epoch: info.Epoch, Stamp: info.Stamp} }})
	require.NoError(t, err)
	require.True(t, announced, "the snapshot is taken once the node is known")

	listed := map[string][]string{}
	require.NoError(t, c.Refs(ctx, func(resource string, nodes []string) error {
		listed[resource] = nodes
		return nil
	}))
	require.Len(t, listed, len(refs), "every reference")
	for _, d := range []digest.Digest{refs[0], refs[api.MaxSyncChunk], refs[len(refs)-1]} {
		require.Equal(t, []string{"node-1"}, listed[d.String()], "%s: in every chunk", d)
	}
	stop, calls := errors.New("enough"), 0
	err = c.Refs(ctx, func(string, []string) error { calls++; return stop })
	require.Equal(t, stop, err, "fn's error, as it is")
	require.Equal(t, 1, calls)

	renewed, err := c.Session(ctx, contentv2.SessionRequest{ClusterID: cluster.ClusterID, InstanceID: "instance-1",
		Echo: &contentv2.Echo{Epoch: info.Epoch, Stamp: info.Stamp, Elapsed: 0}})
	require.NoError(t, err)
	require.True(t, renewed.Synced, "synced once its journal arrived")
	require.False(t, renewed.NewMember)

	ms, err := c.Members(ctx)
	require.NoError(t, err)
	require.Equal(t, coord.Core().Config().NodeExpiry, ms.NodeExpiry)
	require.Equal(t, []contentv2.MemberInfo{{ID: "node-1", Live: true}}, ms.Nodes)
}

// TestSessionRefusals: a late renewal is api.ErrLate, of errdefs class
// FailedPrecondition. The other refusals, and everything else the
// store relies on, are the contract's (contract_test.go).
func TestSessionRefusals(t *testing.T) {
	ctx := context.Background()
	coord := start(t)
	c := node(t, coord, "node-1")
	info := join(t, c, "instance-1")

	_, err := c.Session(ctx, contentv2.SessionRequest{InstanceID: "instance-1",
		Echo: &contentv2.Echo{Epoch: info.Epoch, Stamp: info.Stamp, Elapsed: sessionTTL}})
	require.ErrorIs(t, err, api.ErrLate, "a renewal sent 2·TTL/3 after the answer it echoes")
	require.True(t, errdefs.IsFailedPrecondition(err), "%v", err)
}

// TestLockRefusals: each refusal of a lock or a reference is the
// coordinator's one sentinel (lockserver/api), of its errdefs class, the
// same through a remote coordinator (HTTP codes mapped back) and an
// embedded one (the coordinator's own errors); a skip is api.ErrSkipped.
func TestLockRefusals(t *testing.T) {
	for name, reach := range map[string]func(*testing.T, *lockservertest.Server, string) contentv2.Coordinator{
		"remote": node,
		"embedded": func(t *testing.T, coord *lockservertest.Server, id string) contentv2.Coordinator {
			c, err := lockclient.NewEmbedded(coord.Core(), lockclient.WithNodeID(id))
			require.NoError(t, err)
			t.Cleanup(func() { c.Close() })
			return remote.New(c)
		},
	} {
		t.Run(name, func(t *testing.T) { testLockRefusals(t, reach) })
	}
}

func testLockRefusals(t *testing.T, reach func(*testing.T, *lockservertest.Server, string) contentv2.Coordinator) {
	ctx := context.Background()
	coord := start(t)
	n1, n2 := reach(t, coord, "node-1"), reach(t, coord, "node-2")
	join(t, n1, "i1")
	join(t, n2, "i2")
	pulled, used, deleting := blobDigest(1), blobDigest(2), blobDigest(3)
	refused := func(err, sentinel error, class func(error) bool, what string) {
		t.Helper()
		require.ErrorIs(t, err, sentinel, what)
		require.True(t, class(err), "%s: %v is not of the sentinel's errdefs class", what, err)
	}

	pull, err := n1.Lock(ctx, api.LockRequest{Type: api.OperationPull, ResourceID: pulled.String(), Wait: new(false)})
	require.NoError(t, err)
	_, err = n2.Lock(ctx, api.LockRequest{Type: api.OperationPull, ResourceID: pulled.String(), Wait: new(false)})
	refused(err, api.ErrLocked, errdefs.IsConflict, "held by node-1")
	require.NoError(t, pull.Check(ctx), "a held lock checks out")
	require.NoError(t, pull.Unlock(ctx, true, nil))
	refused(pull.Check(ctx), api.ErrNotHolder, errdefs.IsPermissionDenied, "a released lock does not check out")
	_, err = n2.Lock(ctx, api.LockRequest{Type: api.OperationPull, ResourceID: pulled.String()})
	require.ErrorIs(t, err, api.ErrSkipped, "pulled elsewhere just now")

	require.NoError(t, n1.AddRef(ctx, used, false))
	_, err = n2.Lock(ctx, api.LockRequest{Type: api.OperationDelete, ResourceID: used.String(), Wait: new(false)})
	refused(err, api.ErrInUse, errdefs.IsFailedPrecondition, "node-1 uses it")
	var inUse *api.InUseError
	require.ErrorAs(t, err, &inUse, "the refusal names who uses it")
	require.Equal(t, []string{"node-1"}, inUse.Refs.Nodes)

	del, err := n1.Lock(ctx, api.LockRequest{Type: api.OperationDelete, ResourceID: deleting.String(), Wait: new(false)})
	require.NoError(t, err)
	refused(n2.AddRef(ctx, deleting, false), api.ErrDeleting, errdefs.IsConflict, "a delete is in flight")
	require.NoError(t, del.Unlock(ctx, true, nil))
	refused(n2.AddRef(ctx, deleting, true), api.ErrDeleting, errdefs.IsConflict, "found right after its delete: maybe a stale view")
	require.NoError(t, n2.AddRef(ctx, deleting, false), "committed anew: no stale view")

	n3 := reach(t, coord, "node-3")
	_, err = n3.Session(ctx, contentv2.SessionRequest{InstanceID: "i3"})
	require.NoError(t, err)
	_, err = n1.Lock(ctx, api.LockRequest{Type: api.OperationDelete, ResourceID: blobDigest(4).String(), Wait: new(false)})
	refused(err, api.ErrUnsynced, errdefs.IsFailedPrecondition, "node-3 has not synced")
	refused(reach(t, coord, "node-4").AddRef(ctx, used, false), api.ErrNoSession, errdefs.IsFailedPrecondition, "node-4 has no session")
}

// TestAddRefWithoutSession: a reference of a node that holds no live
// session is refused as api.ErrNoSession (the coordinator's
// no_session, kept as the cause), recording nothing; once the node has
// opened its session the same call is recorded.
func TestAddRefWithoutSession(t *testing.T) {
	ctx := context.Background()
	coord := start(t)
	n := node(t, coord, "node-1")
	d := blobDigest(1)
	err := n.AddRef(ctx, d, false)
	require.ErrorIs(t, err, api.ErrNoSession)
	require.ErrorIs(t, err, api.ErrNoSession, "the cause is kept")
	rc, err := coord.Core().Refs(ctx, d.String())
	require.NoError(t, err)
	require.Empty(t, rc.Nodes, "nothing recorded")

	join(t, n, "i1")
	require.NoError(t, n.AddRef(ctx, d, false))
	rc, err = coord.Core().Refs(ctx, d.String())
	require.NoError(t, err)
	require.Equal(t, []string{"node-1"}, rc.Nodes)
}
