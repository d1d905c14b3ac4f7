package integration

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sharedcontent/sharedcontent/contentv2"
	"github.com/sharedcontent/sharedcontent/internal/testutil/registry"
	"github.com/sharedcontent/sharedcontent/lockserver/api"
)

// The session faults that lost blobs (docs/design.md §8.3 to §8.6, and a
// node that comes back after being forgotten, §8.13). Each test failed before
// the fix, with the blob loss (or the wrong start) its comment says.

const (
	renewalSent   = "sharedcontent_store_session_renewal_sent_timestamp_seconds"
	failOpenSince = "sharedcontent_store_fail_open_since_timestamp_seconds"
)

// pullWhileCollecting pulls img into n while node gc collects over and
// over (whenever n uses a blob, gc's collection may already be offering
// it for deletion), and returns the number of collections.
func pullWhileCollecting(t *testing.T, ctx context.Context, n, gc *faultNode, img registry.Image) int {
	t.Helper()
	pulled := make(chan error, 1)
	go func() { pulled <- n.pullImage(time.Minute, img) }()
	for gcs := 0; ; gcs++ {
		select {
		case err := <-pulled:
			require.NoError(t, err)
			require.NoError(t, gc.collect(ctx))
			return gcs + 1
		default:
			require.NoError(t, gc.collect(ctx))
		}
	}
}

// live reports whether the coordinator counts node's session live.
func (c *coordinator) live(ctx context.Context, node string) bool {
	resp, err := c.admin.Nodes(ctx)
	if err != nil {
		return false
	}
	for _, n := range resp.Nodes {
		if n.NodeID == node {
			return n.Live
		}
	}
	return false
}

// requireFailedOpenByTheRule fails unless n failed open, and did so at
// least contentv2.FailOpenDelay(ttl) after the last renewal it sent (both
// times as n recorded them).
func requireFailedOpenByTheRule(t *testing.T, n *faultNode, ttl time.Duration) {
	t.Helper()
	sent, since := n.counter(renewalSent), n.counter(failOpenSince)
	require.Positive(t, sent)
	require.Positive(t, since, "node %s failed open", n.id)
	require.GreaterOrEqual(t, since-sent, contentv2.FailOpenDelay(ttl).Seconds()-1e-6,
		"node %s failed open %.3f s after its last renewal", n.id, since-sent)
	t.Logf("node %s failed open %.3f s after the last renewal it sent (the rule: at least %s)", n.id, since-sent, contentv2.FailOpenDelay(ttl))
}

// TestFaultRestartWhileCutOff (scenario 3): node 3's plugin restarts
// while it is cut off from a coordinator whose session TTL (6 s) is longer
// than the node's configured one (400 ms). The restarted node counts with
// the TTL the coordinator announced (kept in its journal), so it uses
// blobs unregistered only once the session it may have left has surely
// expired; node 1's GC, running all along, deletes none of them.
//
// Before: the restarted node fell back to its built-in TTL, wrote image B
// unregistered about 2.4 s after the restart while the coordinator still
// counted its old session live and synced, and node 1's GC deleted it.
func TestFaultRestartWhileCutOff(t *testing.T) {
	cfg := faultConfig()
	cfg.SessionTTL = 6 * time.Second
	e := newFaultEnv(t, cfg)
	ctx := nsContext()
	imgA, imgB := e.push("a"), e.push("b")
	n1, n3 := e.addNode("node-1"), e.addNode("node-3")
	for _, n := range []*faultNode{n1, n3} {
		require.NoError(t, n.pullImage(time.Minute, imgA))
	}
	e.coord.waitSynced(t, "node-1", "node-3")

	n3.proxy.Cut()
	n3.Close()
	require.NoError(t, n3.Open(), "a node restarts while its coordinator is unreachable")
	gcs := pullWhileCollecting(t, ctx, n3, n1, imgB)
	t.Logf("node 1 collected %d times while the restarted node 3 pulled", gcs)
	e.requireFiles(t, imgB, "node 1's GC while node 3 is cut off")
	requireImage(t, ctx, n3.Node, imgB)
	requireReadable(t, ctx, n1, n3)
	requireFailedOpenByTheRule(t, n3, cfg.SessionTTL)

	n3.proxy.Reconnect()
	e.coord.waitSynced(t, "node-1", "node-3")
	e.requireRefs(t, ctx, imgB, "node-3")
}

// TestFaultLateKeepalives (scenario 4): node 3's session renewals reach
// the coordinator 1.6 s late (TTL 3 s) and its other calls not at all.
// A late renewal extends nothing (409 late), so the coordinator does not
// keep node 3 synced, and node 1's GC deletes nothing node 3 wrote
// fail-open.
//
// Before: every late renewal extended node 3's session, so the
// coordinator kept it "live and synced" and granted node 1's deletes,
// while node 3, never answered, failed open: node 1's GC deleted image B.
func TestFaultLateKeepalives(t *testing.T) {
	cfg := faultConfig()
	cfg.SessionTTL = 3 * time.Second
	e := newFaultEnv(t, cfg)
	ctx := nsContext()
	imgA, imgB := e.push("a"), e.push("b")
	n1, n2, n3 := e.addNode("node-1"), e.addNode("node-2"), e.addNode("node-3")
	all := []*faultNode{n1, n2, n3}
	for _, n := range all {
		require.NoError(t, n.pullImage(time.Minute, imgA))
	}
	e.coord.waitSynced(t, "node-1", "node-2", "node-3")
	require.NoError(t, n1.RemoveImage(ctx, imgA.Ref))

	// The first matching hold applies: session calls are delayed, every
	// other call is held until released.
	late := n3.proxy.holdRequests(-1, 1600*time.Millisecond, "/nodes/session")
	blocked := n3.proxy.holdRequests(-1, 0, "HTTP/1.1")
	gcs := pullWhileCollecting(t, ctx, n3, n1, imgB)
	t.Logf("node 1 collected %d times while node 3 pulled; %d session calls delayed", gcs, late.Held())
	e.requireFiles(t, imgA, "node 1's GC while node 3's keepalives are late")
	e.requireFiles(t, imgB, "node 1's GC while node 3's keepalives are late")
	requireImage(t, ctx, n3.Node, imgB)
	requireReadable(t, ctx, all...)
	requireFailedOpenByTheRule(t, n3, cfg.SessionTTL)
	require.Positive(t, n1.counter(storeDeletes, "result", "unsynced"), "node 1's deletes waited for node 3")

	late.release()
	blocked.release()
	e.coord.waitSynced(t, "node-1", "node-2", "node-3")
	e.requireRefs(t, ctx, imgB, "node-3")
	require.NoError(t, n1.collect(ctx))
	requireReadable(t, ctx, all...)
}

// TestFaultStateDirWiped (scenario 5): node 2's state dir (its journal)
// is lost while its containerd metadata survives, and the node restarts
// with an empty journal of a new generation. A sync from a generation the
// coordinator does not know only adds references, and the node first
// takes into its new journal the references the coordinator has of it,
// so neither that sync nor any later one drops them: node 1's GC keeps
// node 2's image.
//
// Before: node 2's empty sync removed all its references, and node 1's GC
// deleted image A, which node 2's containerd still lists.
func TestFaultStateDirWiped(t *testing.T) {
	e := newFaultEnv(t, faultConfig())
	ctx := nsContext()
	imgA := e.push("a")
	n1, n2 := e.addNode("node-1"), e.addNode("node-2")
	for _, n := range []*faultNode{n1, n2} {
		require.NoError(t, n.pullImage(time.Minute, imgA))
	}
	e.coord.waitSynced(t, "node-1", "node-2")
	require.NoError(t, n1.RemoveImage(ctx, imgA.Ref))

	n2.Close()
	require.NoError(t, os.RemoveAll(filepath.Join(n2.stateDir, "sharedcontent")), "the journal is lost")
	require.Eventually(t, func() bool { return !e.coord.live(context.Background(), "node-2") },
		20*time.Second, 20*time.Millisecond, "node 2's session lapses while it is reinstalled")
	require.FileExists(t, filepath.Join(n2.stateDir, "meta.db"), "containerd's metadata survives")
	// A new state dir is another lineage: the node ID stays node 2's old
	// one until the operator releases it (docs/design.md §8.5).
	require.ErrorIs(t, n2.Open(), api.ErrDuplicateNode, "a wiped state dir needs the operator")
	_, err := e.coord.admin.Release(ctx, "node-2")
	require.NoError(t, err)
	require.NoError(t, n2.Open())
	e.coord.waitSynced(t, "node-1", "node-2")
	require.NoError(t, n1.collect(ctx))
	e.requireFiles(t, imgA, "node 1's GC after node 2's first sync with its new journal")
	// A later full sync (here a coordinator restart; a lapsed session
	// does the same) comes from a generation the coordinator knows now,
	// and replaces: the new journal must hold what the old one did.
	e.coord.Restart()
	e.coord.waitSynced(t, "node-1", "node-2")
	require.NoError(t, n1.collect(ctx))

	e.requireFiles(t, imgA, "node 1's GC after node 2's journal was lost")
	for _, d := range imgA.Descriptors() {
		users, err := e.coord.Refs(ctx, d.Digest)
		require.NoError(t, err)
		require.Contains(t, users, "node-2", "node 2's reference of %s", d.Digest)
	}
	requireImage(t, ctx, n2.Node, imgA)
	requireReadable(t, ctx, n1, n2)
}

// TestFaultDuplicateNodeID (scenario 6): a second host starts with the
// node ID of a live one (a cloned VM, a shared hostname). The coordinator
// refuses its session (409 duplicate_node) and its store refuses to
// start, naming the clash; the first host's references stay, and node
// 1's GC keeps its image.
//
// Before: the second host started, synced its empty journal under the
// same node ID, which dropped the first host's references, and node 1's
// GC deleted the first host's image.
func TestFaultDuplicateNodeID(t *testing.T) {
	e := newFaultEnv(t, faultConfig())
	ctx := nsContext()
	imgA := e.push("a")
	n1, host := e.addNode("node-1"), e.addNode("host")
	for _, n := range []*faultNode{n1, host} {
		require.NoError(t, n.pullImage(time.Minute, imgA))
	}
	e.coord.waitSynced(t, "node-1", "host")
	require.NoError(t, n1.RemoveImage(ctx, imgA.Ref))

	clone, err := e.startNode("host", nil)
	require.Error(t, err, "a second live instance of node host must not start")
	if clone != nil {
		require.NoError(t, clone.collect(ctx)) // what the clone's GC would do
	}
	require.ErrorIs(t, err, api.ErrDuplicateNode)
	require.ErrorContains(t, err, `"host"`)
	require.ErrorContains(t, err, "--node-id")

	require.NoError(t, n1.collect(ctx))
	e.requireFiles(t, imgA, "node 1's GC after the clone's refused start")
	for _, d := range imgA.Descriptors() {
		users, err := e.coord.Refs(ctx, d.Digest)
		require.NoError(t, err)
		// Node 1's own reference may stay too, if its delete did not reach
		// the coordinator on a loaded machine: that keeps the blob.
		require.Contains(t, users, "host", "the first host's reference of %s", d.Digest)
	}
	requireReadable(t, ctx, n1, host)
}

// TestFaultCloneOfCutOffHost: a clone of a host (another state dir, the
// same node ID: a cloned VM whose ID defaults to the hostname) starts
// while the host is cut off and its session has lapsed. The node ID
// belongs to the host's lineage (its journal generation), so the clone is
// refused (409 duplicate_node, naming `sharedcontentctl node release`),
// as it is again once the clash has ended; the host, restarted while
// still cut off (its end of session lost, as after a crash), takes its ID
// back without an operator and keeps every blob.
//
// Before: the clone started, took in the ID's references (a new journal
// is seeded with them) and its GC dropped them, deleting every blob of
// the image the host's containerd still lists.
func TestFaultCloneOfCutOffHost(t *testing.T) {
	e := newFaultEnv(t, faultConfig())
	ctx := nsContext()
	imgA := e.push("a")
	n1, host := e.addNode("node-1"), e.addNode("host")
	require.NoError(t, host.pullImage(time.Minute, imgA))
	e.coord.waitSynced(t, "node-1", "host")

	host.proxy.Cut()
	require.Eventually(t, func() bool { return !e.coord.live(context.Background(), "host") },
		20*time.Second, 20*time.Millisecond, "the host's session lapses while it is cut off")
	startClone := func(why string) {
		t.Helper()
		clone, err := e.startNode("host", nil)
		if clone != nil {
			require.NoError(t, clone.collect(ctx)) // what the clone's GC would do
			clone.Close()
		}
		require.ErrorIs(t, err, api.ErrDuplicateNode, why)
		require.ErrorContains(t, err, "sharedcontentctl node release host")
		require.NoError(t, n1.collect(ctx))
		e.requireFiles(t, imgA, why)
	}
	startClone("a clone starting while the host is cut off")
	refused := time.Now()
	// Once the clash has ended (a session TTL after the last refusal) the
	// ID is still the host's.
	time.Sleep(time.Until(refused.Add(faultSessionTTL)))
	startClone("a clone starting once the clash has ended")

	host.Close() // its end of session is lost: as after a crash
	host.proxy.Reconnect()
	require.NoError(t, host.Open(), "the host itself restarts without an operator")
	e.coord.waitSynced(t, "node-1", "host")
	require.NoError(t, n1.collect(ctx))
	require.NoError(t, host.collect(ctx))
	e.requireRefs(t, ctx, imgA, "host")
	requireImage(t, ctx, host.Node, imgA)
	requireReadable(t, ctx, n1, host)
}

// TestFaultForgottenNodeReturns (scenario 1, second half): node 3 is cut
// off and an operator forgets it; node 1's GC then deletes image B, which
// only node 3 used. When node 3 comes back it is told it is a new member
// while its journal says it was one: it says so (log, metric),
// re-registers only the blobs that still exist (image A's), and drops and
// reports the ones that are gone.
//
// Before: node 3 synced its whole journal without a word, re-registering
// image B's deleted blobs as if it still had them.
func TestFaultForgottenNodeReturns(t *testing.T) {
	e := newFaultEnv(t, faultConfig())
	ctx := nsContext()
	imgA, imgB := e.push("a"), e.push("b")
	n1, n3 := e.addNode("node-1"), e.addNode("node-3")
	require.NoError(t, n1.pullImage(time.Minute, imgA))
	require.NoError(t, n3.pullImage(time.Minute, imgA))
	require.NoError(t, n3.pullImage(time.Minute, imgB))
	// Node 3 must know it is a member before it is cut off, or it cannot
	// tell it was forgotten (faultEnv.waitSynced).
	e.waitSynced(t, "node-1", "node-3")

	n3.proxy.Cut()
	require.Eventually(t, func() bool { return e.coord.admin.Forget(context.Background(), "node-3") == nil },
		20*time.Second, 20*time.Millisecond, "the operator forgets node 3 once its session lapsed")
	// Node 1's GC deletes image B's blobs, which only node 3 used. A
	// collection keeps what it may not delete yet (node 1's own session
	// lapsed on a loaded machine, and it is unsynced until it syncs again)
	// and a later one retries: collect until all are gone.
	gone := map[string]bool{}
	require.Eventually(t, func() bool {
		if err := n1.collect(ctx); err != nil {
			return false
		}
		for _, d := range imgB.Descriptors() {
			if _, err := os.Stat(blobPath(e.root, d.Digest.String())); os.IsNotExist(err) {
				gone[d.Digest.String()] = true
			}
		}
		return len(gone) == len(imgB.Descriptors())
	}, 20*time.Second, 50*time.Millisecond, "node 1's GC deletes image B's blobs while node 3 is forgotten")

	n3.proxy.Reconnect()
	e.waitSynced(t, "node-1", "node-3")
	require.Equal(t, 1.0, n3.counter("sharedcontent_store_forgotten_total"), "node 3 says it was forgotten")
	require.Equal(t, float64(len(gone)), n3.counter("sharedcontent_store_forgotten_lost_blobs_total"), "and reports the blobs that are gone")
	e.requireRefs(t, ctx, imgA, "node-1", "node-3")
	for _, d := range imgB.Descriptors() {
		if gone[d.Digest.String()] {
			users, err := e.coord.Refs(ctx, d.Digest)
			require.NoError(t, err)
			require.Empty(t, users, "blob %s, gone, is not re-registered", d.Digest)
		}
	}
	requireReadable(t, ctx, n1)
	requireImage(t, ctx, n3.Node, imgA)
}
