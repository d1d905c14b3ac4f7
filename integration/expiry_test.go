package integration

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sharedcontent/sharedcontent/contentv2"
)

// The expiry tests: time alone never proves a node dead
// (docs/design.md §8.4). A member is expired only when the coordinator
// has not heard from it for --node-expiry of its own uptime and the
// reaper has seen its marker in the shared root unchanged that long.

// expiryNodeExpiry is the short --node-expiry of these tests.
const expiryNodeExpiry = time.Second

// isMember reports whether the coordinator lists id as a member.
func (e *faultEnv) isMember(ctx context.Context, id string) bool {
	e.t.Helper()
	nodes, err := e.coord.admin.Nodes(ctx)
	require.NoError(e.t, err)
	for _, n := range nodes.Nodes {
		if n.NodeID == id {
			return true
		}
	}
	return false
}

// reapPass runs one reaper pass on n, which must get the reap lock.
func reapPass(t *testing.T, ctx context.Context, n *faultNode) contentv2.ReapReport {
	t.Helper()
	rep, err := n.Store.Reap(ctx)
	require.NoError(t, err)
	require.True(t, rep.Ran, "%s's reaper got the reap lock", n.id)
	return rep
}

// TestFaultNodeCutOffBeyondExpiry (docs/design.md §8.4): node 3
// registered image A, then is cut off from the coordinator for longer
// than --node-expiry while its plugin keeps running, and pulls image B
// (fail-open) meanwhile; node 1's reaper runs pass after pass. Node 1
// removes A and B and collects. Node 3 must still be a member, and every
// blob of A and B must read back on node 3.
//
// Before, the coordinator forgot node 3 after --node-expiry of wall-clock
// time without a session, and node 1's GC deleted A and B.
func TestFaultNodeCutOffBeyondExpiry(t *testing.T) {
	cfg := faultConfig()
	cfg.NodeExpiry = expiryNodeExpiry
	e := newFaultEnv(t, cfg)
	ctx := nsContext()
	imgA, imgB := e.push("a"), e.push("b")
	n1 := e.addNode("node-1", contentv2.WithReaper(0, 0)) // the test runs the passes; no grace
	n3 := e.addNode("node-3")
	for _, n := range []*faultNode{n1, n3} {
		require.NoError(t, n.pullImage(time.Minute, imgA))
	}
	e.coord.waitSynced(t, "node-1", "node-3")
	e.requireRefs(t, ctx, imgA, "node-1", "node-3")

	n3.proxy.Cut()
	cut := time.Now()
	require.NoError(t, n3.pullImage(time.Minute, imgB), "node 3 pulls fail-open while cut off")
	require.NoError(t, n1.pullImage(time.Minute, imgB))
	// Node 3's session ended at most a session TTL after the cut: the
	// coordinator has not heard from it for twice the node expiry once
	// this much time has passed.
	away := faultSessionTTL + 2*expiryNodeExpiry
	passes := 0
	for time.Since(cut) < away || passes < 3 {
		reapPass(t, ctx, n1)
		passes++
	}
	t.Logf("node 3 cut off for %s (node expiry %s); node 1's reaper ran %d passes", time.Since(cut).Round(time.Millisecond), expiryNodeExpiry, passes)

	require.NoError(t, n1.RemoveImage(ctx, imgA.Ref))
	require.NoError(t, n1.RemoveImage(ctx, imgB.Ref))
	require.NoError(t, n1.collect(ctx))
	reapPass(t, ctx, n1)
	e.requireFiles(t, imgA, "node 1's GC while node 3 is cut off")
	e.requireFiles(t, imgB, "node 1's GC while node 3 is cut off")
	requireImage(t, ctx, n3.Node, imgA)
	requireImage(t, ctx, n3.Node, imgB)
	requireReadable(t, ctx, n1, n3)
	require.True(t, e.isMember(ctx, "node-3"), "node 3, cut off but running, was forgotten")

	// Back: node 3 syncs, and its uses keep both images.
	n3.proxy.Reconnect()
	e.coord.waitSynced(t, "node-1", "node-3")
	e.requireRefs(t, ctx, imgA, "node-3")
	e.requireRefs(t, ctx, imgB, "node-3")
	require.NoError(t, n1.collect(ctx))
	reapPass(t, ctx, n1)
	requireImage(t, ctx, n3.Node, imgA)
	requireImage(t, ctx, n3.Node, imgB)
	requireReadable(t, ctx, n1, n3)
}

// TestFaultCoordinatorDownBeyondExpiry (docs/design.md §8.4): node 3 is
// stopped, then the coordinator is down for longer than --node-expiry (a
// weekend) and restarts on the same data directory. Node 3's marker has
// not changed all that time, but the coordinator counts node 3's absence
// only in its own uptime: while node 1's reaper runs after the restart,
// and node 1 removes image A and collects, node 3 stays a member and
// nothing of its images goes. It comes back and syncs.
//
// Before, a member's last sighting was wall-clock time, so the restarted
// coordinator forgot every member not back within its first expiry tick
// (node 3 here): node 1's GC deleted image A and the reaper image S.
func TestFaultCoordinatorDownBeyondExpiry(t *testing.T) {
	const expiry = 3 * time.Second
	cfg := faultConfig()
	cfg.NodeExpiry = expiry
	e := newFaultEnv(t, cfg)
	ctx := nsContext()
	imgA, imgS := e.push("a"), e.push("s")
	n1 := e.addNode("node-1", contentv2.WithReaper(0, 0)) // the test runs the passes; no grace
	n2, n3 := e.addNode("node-2"), e.addNode("node-3")
	all := []*faultNode{n1, n2, n3}
	for _, n := range []*faultNode{n1, n3} {
		require.NoError(t, n.pullImage(time.Minute, imgA))
	}
	require.NoError(t, n3.pullImage(time.Minute, imgS))
	e.coord.waitSynced(t, "node-1", "node-2", "node-3")

	n3.Close() // node 3 is down over the weekend too: its marker stops changing
	reapPass(t, ctx, n1)
	e.coord.Stop()
	down := time.Now()
	time.Sleep(2 * expiry) // the outage itself: longer than node_expiry
	beforeStart := time.Now()
	e.coord.Start()
	t.Logf("coordinator down for %s (node expiry %s)", beforeStart.Sub(down).Round(time.Millisecond), expiry)
	// Nodes 1 and 2 come back at once, node 3 later. Node 1's reaper runs
	// meanwhile, within the first third of the node expiry of the
	// coordinator's uptime (a whole one must pass before it may expire
	// anyone).
	passes := 0
	for time.Since(beforeStart) < expiry/3 {
		if rep, err := n1.Store.Reap(ctx); err == nil && rep.Ran {
			passes++
		}
	}
	require.Positive(t, passes, "node 1's reaper ran after the restart")
	require.Eventually(t, func() bool { return e.liveSynced(ctx, "node-1", "node-2") }, 20*time.Second, 20*time.Millisecond)
	require.NoError(t, n1.RemoveImage(ctx, imgA.Ref))
	require.NoError(t, n1.collect(ctx))
	e.requireFiles(t, imgA, "node 1's GC after the outage, node 3 still away")
	e.requireFiles(t, imgS, "node 1's reaper after the outage, node 3 still away")
	for _, id := range []string{"node-1", "node-2", "node-3"} {
		require.True(t, e.isMember(ctx, id), "%s was forgotten after the coordinator's outage", id)
	}

	require.NoError(t, n3.Open())
	e.coord.waitSynced(t, "node-1", "node-2", "node-3")
	require.NoError(t, n1.collect(ctx))
	reapPass(t, ctx, n1)
	e.requireFiles(t, imgA, "node 1's GC once node 3 is back")
	e.requireFiles(t, imgS, "node 1's reaper once node 3 is back")
	e.requireRefs(t, ctx, imgA, "node-3")
	e.requireRefs(t, ctx, imgS, "node-3")
	requireImage(t, ctx, n3.Node, imgA)
	requireImage(t, ctx, n3.Node, imgS)
	requireReadable(t, ctx, all...)
}

// liveSynced reports whether each of ids is a live, synced member.
func (e *faultEnv) liveSynced(ctx context.Context, ids ...string) bool {
	nodes, err := e.coord.admin.Nodes(ctx)
	if err != nil {
		return false
	}
	ok := map[string]bool{}
	for _, n := range nodes.Nodes {
		ok[n.NodeID] = n.Live && n.Synced
	}
	for _, id := range ids {
		if !ok[id] {
			return false
		}
	}
	return true
}
