package integration

import (
	"context"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sharedcontent/sharedcontent/contentv2"
	"github.com/sharedcontent/sharedcontent/lockserver/api"
)

// TestFaultCloneWithCopiedStateDir (docs/design.md §8.5): a VM is cloned
// with the host's state dir (its journal, so its journal generation, and
// its containerd metadata); the host pulls image B afterwards and is then
// cut off. The clone starts under the host's node ID while the host's
// session has lapsed. Its state dir was made on another host (another
// host fingerprint), so its journal starts a new generation: the
// coordinator refuses it as another host of the ID, and none of the ID's
// references is dropped. The host itself, restarted (same fingerprint),
// keeps its generation and starts without an operator; every blob reads
// back.
//
// Before, the clone had the host's generation and started: the
// coordinator took it for the host, and a sync from the member's own
// generation replaces the ID's references (§8.6) with the copy's, which
// lack image B's, which only the host's containerd lists.
func TestFaultCloneWithCopiedStateDir(t *testing.T) {
	e := newFaultEnv(t, faultConfig())
	ctx := nsContext()
	imgA, imgB := e.push("a"), e.push("b")
	n1 := e.addNode("node-1", contentv2.WithHostID("dmi:node-1"))
	host := e.addNode("host", contentv2.WithHostID("dmi:host"))
	require.NoError(t, host.pullImage(time.Minute, imgA))
	e.coord.waitSynced(t, "node-1", "host")

	cloneState := filepath.Join(t.TempDir(), "state")
	out, err := exec.Command("cp", "-a", host.stateDir, cloneState).CombinedOutput()
	require.NoError(t, err, "copying the host's state dir: %s", out)
	require.NoError(t, host.pullImage(time.Minute, imgB))
	e.coord.waitSynced(t, "node-1", "host")
	e.requireRefs(t, ctx, imgB, "host")

	host.proxy.Cut()
	require.Eventually(t, func() bool { return !e.coord.live(context.Background(), "host") },
		20*time.Second, 20*time.Millisecond, "the host's session lapses while it is cut off")
	clone := &faultNode{id: "host", stateDir: cloneState, proxy: startProxy(t, e.coord.Addr()),
		opts: nodeOptions(contentv2.WithHostID("dmi:clone")), env: e}
	t.Cleanup(clone.Close)
	err = clone.Open()
	if err == nil {
		require.NoError(t, clone.collect(ctx)) // what the clone's GC would do
		clone.Close()
	}
	require.ErrorIs(t, err, api.ErrDuplicateNode, "the clone is another host of the ID")
	require.ErrorContains(t, err, "sharedcontentctl node release host")
	e.requireRefs(t, ctx, imgA, "host")
	e.requireRefs(t, ctx, imgB, "host")
	require.NoError(t, n1.collect(ctx))
	e.requireFiles(t, imgB, "the clone dropped nothing")

	host.Close() // its end of session is lost: as after a crash
	host.proxy.Reconnect()
	require.NoError(t, host.Open(), "the host itself restarts without an operator")
	e.coord.waitSynced(t, "node-1", "host")
	require.NoError(t, host.collect(ctx))
	e.requireRefs(t, ctx, imgA, "host")
	e.requireRefs(t, ctx, imgB, "host")
	requireImage(t, ctx, host.Node, imgB)
	requireReadable(t, ctx, n1, host)
}
