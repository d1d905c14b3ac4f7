package integration

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sharedcontent/sharedcontent/contentv2"
)

// TestFaultCleanRestartNotDuplicate: a plugin stopped cleanly (an upgrade,
// a config change) ends its session, so the coordinator shows it not live
// at once and its next start (a new instance) is not refused as a
// duplicate, taking less than the session TTL; deletes wait for it until
// it has synced again, and node 1's GC then keeps what it uses.
//
// Before: the old session stayed live for the TTL after the stop, and the
// restarted plugin was refused (duplicate_node) until it lapsed.
func TestFaultCleanRestartNotDuplicate(t *testing.T) {
	const ttl = 5 * time.Second
	cfg := faultConfig()
	cfg.SessionTTL = ttl
	e := newFaultEnv(t, cfg)
	ctx := nsContext()
	imgA := e.push("a")
	n1, host := e.addNode("node-1"), e.addNode("host", contentv2.WithSessionTTL(ttl))
	for _, n := range []*faultNode{n1, host} {
		require.NoError(t, n.pullImage(time.Minute, imgA))
	}
	e.coord.waitSynced(t, "node-1", "host")
	require.NoError(t, n1.RemoveImage(ctx, imgA.Ref))

	host.Close()
	stopped := time.Now()
	require.False(t, e.coord.live(context.Background(), "host"), "a plugin stopped cleanly has ended its session")
	require.NoError(t, host.Open())
	restart := time.Since(stopped)
	require.Zero(t, host.counter("sharedcontent_store_session_refusals_total", "reason", "duplicate_node"),
		"the restarted plugin is not refused as a duplicate")
	require.Less(t, restart, ttl, "the restart does not wait for the old session to lapse")
	t.Logf("restarted in %v (session TTL %v)", restart, ttl)

	e.coord.waitSynced(t, "node-1", "host")
	require.NoError(t, n1.collect(ctx))
	e.requireFiles(t, imgA, "node 1's GC after host's restart")
	requireImage(t, ctx, host.Node, imgA)
	requireReadable(t, ctx, n1, host)
}
