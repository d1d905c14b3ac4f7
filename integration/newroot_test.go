package integration

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/containerd/errdefs"
	"github.com/stretchr/testify/require"

	"github.com/sharedcontent/sharedcontent/contentv2"
	"github.com/sharedcontent/sharedcontent/contentv2/remote"
	"github.com/sharedcontent/sharedcontent/lockclient"
	"github.com/sharedcontent/sharedcontent/lockserver/api"
)

// A brand-new node's shared root (docs/design.md §8.19): one node's view
// is evidence about that node only. A node with an empty state dir has no
// record of the root to compare with; the coordinator knows whether the
// cluster already has a root.

// TestNewNodeRootNotMountedAtStart: the cluster exists (node-a joined and
// pulled); node-b, brand new (empty state dir), starts while its shared
// storage is not mounted at its root (an empty directory). It refuses to
// start, naming the path and the fix, writes nothing there, and is not
// made a member; a restart changes nothing. Once the storage is mounted it
// joins, every blob reads back on both nodes and node-b pulls.
//
// Before, node-b claimed the empty local directory (its cluster.json and
// marker on local disk) and served it: its pulls landed on local disk and
// its reaper took every blob of the cluster for missing.
func TestNewNodeRootNotMountedAtStart(t *testing.T) {
	requireMounts(t)
	e := newFaultEnv(t, faultConfig())
	ctx := nsContext()
	imgA, imgB := e.push("a"), e.push("b")
	mA := bindRoot(t, e.root)
	a, err := e.startNodeAt("node-a", mA.path)
	require.NoError(t, err)
	require.NoError(t, a.pullImage(time.Minute, imgA))
	e.coord.waitSynced(t, "node-a")

	mB := bindRoot(t, e.root)
	mB.unmount() // the mount failed at boot: an empty directory
	b, err := e.startNodeAt("node-b", mB.path)
	requireNewRootRefused(t, err, mB.path)
	mB.requireEmpty()
	require.NotContains(t, memberIDs(t, e.coord), "node-b", "a refused node is not made a member (deletes do not wait for it)")
	require.NoFileExists(t, filepath.Join(b.stateDir, "sharedcontent", contentv2.RootRecordFile))

	err = b.Open()
	requireNewRootRefused(t, err, mB.path)
	mB.requireEmpty()

	mB.mount(e.root)
	require.NoError(t, b.Open(), "with the shared storage mounted, the new node joins")
	require.NoError(t, b.pullImage(time.Minute, imgA))
	require.NoError(t, b.pullImage(time.Minute, imgB))
	e.coord.waitSynced(t, "node-a", "node-b")
	requireReadable(t, ctx, a, b)
	e.requireRefs(t, ctx, imgA, "node-a", "node-b")
	e.requireRefs(t, ctx, imgB, "node-b")
}

// TestNewNodeLearnsRootLater: node-b, brand new on an unmounted root,
// starts while the coordinator is unreachable (it claims nothing, and
// writes nothing: not even its marker). When the coordinator answers that
// the cluster has a root, node-b turns unready (no_identity), refuses
// writes, and still writes nothing there; once the storage is mounted it
// resumes by itself, joins, and pulls.
func TestNewNodeLearnsRootLater(t *testing.T) {
	requireMounts(t)
	e := newFaultEnv(t, faultConfig())
	ctx := nsContext()
	imgA, imgB := e.push("a"), e.push("b")
	a, err := e.startNodeAt("node-a", bindRoot(t, e.root).path)
	require.NoError(t, err)
	require.NoError(t, a.pullImage(time.Minute, imgA))
	e.coord.waitSynced(t, "node-a")

	mB := bindRoot(t, e.root)
	mB.unmount()
	b := &faultNode{id: "node-b", root: mB.path, stateDir: t.TempDir(), proxy: startProxy(t, e.coord.Addr()), opts: nodeOptions(), env: e}
	t.Cleanup(b.Close)
	b.proxy.Cut()
	require.NoError(t, b.Open(), "a coordinator that cannot be reached is no reason to refuse")
	mB.requireEmpty()
	b.proxy.Reconnect()
	err = requireUnready(t, b, "no_identity")
	require.ErrorContains(t, err, "is the shared filesystem mounted at "+mB.path)
	requireRefusesWrites(t, ctx, b, mB, imgB)
	mB.requireEmpty()
	require.NotContains(t, memberIDs(t, e.coord), "node-b")

	mB.mount(e.root)
	requireReadyAgain(t, b)
	require.NoError(t, b.pullImage(time.Minute, imgA))
	require.NoError(t, b.pullImage(time.Minute, imgB))
	e.coord.waitSynced(t, "node-a", "node-b")
	requireReadable(t, ctx, a, b)
	e.requireRefs(t, ctx, imgA, "node-a", "node-b")
}

func requireNewRootRefused(t *testing.T, err error, path string) {
	t.Helper()
	requireRootRefusal(t, err, path)
	require.ErrorIs(t, err, api.ErrRootClaimed)
	require.ErrorContains(t, err, "is the shared filesystem mounted at "+path)
	require.True(t, errdefs.IsFailedPrecondition(err), "a refusal at start: %v", err)
}

// TestFirstNodesRaceOnTwoRoots: the very first two nodes of a new cluster
// start together, node-b on an empty directory (its shared storage not
// mounted), node-a on the shared root. Both ask to claim before either
// has (the coordinator accepts both: the cluster has no root yet); node-a
// names its root first. node-b, which claimed its own directory meanwhile,
// is refused when it names it, removes the cluster file it wrote and does
// not start; the cluster has one root. Then it starts on the shared root.
//
// Before, each claimed its own root with the coordinator's cluster ID: two
// roots of one cluster, each node's view of the other's blobs "missing".
func TestFirstNodesRaceOnTwoRoots(t *testing.T) {
	e := newFaultEnv(t, faultConfig())
	ctx := nsContext()
	img := e.push("a")
	stray := t.TempDir()

	var a *faultNode
	var once sync.Once
	racer := func() {
		once.Do(func() {
			var err error
			a, err = e.startNodeAt("node-a", e.root)
			require.NoError(t, err)
		})
	}
	client, err := lockclient.New(e.coord.URL(), lockclient.WithNodeID("node-b"), lockclient.WithMaxRetries(1))
	require.NoError(t, err)
	t.Cleanup(func() { client.Close() })
	stateB := t.TempDir()
	cs, err := contentv2.NewStore(stray, "node-b", afterClaimAsked{Coordinator: remote.New(client), then: racer},
		append(nodeOptions(), contentv2.WithStateDir(filepath.Join(stateB, "sharedcontent")))...)
	if err == nil {
		cs.Close()
	}
	require.NotNil(t, a, "node-a started while node-b was claiming")
	require.ErrorIs(t, err, api.ErrRootClaimed)
	require.ErrorIs(t, err, contentv2.ErrRootUnverified)
	require.ErrorContains(t, err, "is the shared filesystem mounted at "+stray)
	require.True(t, errdefs.IsFailedPrecondition(err), "%v", err)
	ents, err := os.ReadDir(stray)
	require.NoError(t, err)
	for _, ent := range ents {
		require.NotEqual(t, contentv2.MetaDir, ent.Name(), "node-b removed the cluster file it wrote in the refused root")
	}
	id, err := contentv2.ReadClusterID(e.root)
	require.NoError(t, err)
	require.Equal(t, e.coord.Cluster().ClusterID, id, "the shared root is the cluster's")

	// node-b's state dir is its lineage (the coordinator recorded it at
	// its first session): it starts with the same one.
	b := &faultNode{id: "node-b", root: e.root, stateDir: stateB, proxy: startProxy(t, e.coord.Addr()), opts: nodeOptions(), env: e}
	t.Cleanup(b.Close)
	require.NoError(t, b.Open())
	require.NoError(t, a.pullImage(time.Minute, img))
	require.NoError(t, b.pullImage(time.Minute, img))
	e.coord.waitSynced(t, "node-a", "node-b")
	requireReadable(t, ctx, a, b)
	e.requireRefs(t, ctx, img, "node-a", "node-b")
}

// afterClaimAsked runs then once the coordinator has accepted a session
// asking to claim an unclaimed root, before the node claims it.
type afterClaimAsked struct {
	contentv2.Coordinator
	then func()
}

func (c afterClaimAsked) Session(ctx context.Context, req contentv2.SessionRequest) (contentv2.SessionInfo, error) {
	info, err := c.Coordinator.Session(ctx, req)
	if err == nil && req.Unclaimed {
		c.then()
	}
	return info, err
}

// memberIDs returns the coordinator's members (GET /nodes).
func memberIDs(t *testing.T, c *coordinator) []string {
	t.Helper()
	resp, err := c.admin.Nodes(context.Background())
	require.NoError(t, err)
	var ids []string
	for _, n := range resp.Nodes {
		ids = append(ids, n.NodeID)
	}
	return ids
}
