package contentv2_test

import (
	"context"
	"testing"
	"time"

	"github.com/containerd/containerd/v2/core/content"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"github.com/stretchr/testify/require"

	"github.com/sharedcontent/sharedcontent/internal/testutil/testnet"
	"github.com/sharedcontent/sharedcontent/lockclient"
	"github.com/sharedcontent/sharedcontent/lockserver"
	"github.com/sharedcontent/sharedcontent/lockserver/api"
	"github.com/sharedcontent/sharedcontent/lockserver/lockservertest"
)

// failoverEnv is a real coordinator on loopback and two nodes on one
// root, both synced: node-1 reaches the coordinator through a relay, which
// a test black-holes to cut it off as a failover does (its calls go
// unanswered), node-2 directly.
type failoverEnv struct {
	ctx          context.Context
	coord        *lockservertest.Server
	relay        *testnet.Relay
	root         string
	node1, node2 content.Store
}

func newFailoverEnv(t *testing.T, cfg lockserver.Config) *failoverEnv {
	e := &failoverEnv{ctx: context.Background(), coord: lockservertest.Start(t, lockservertest.WithConfig(cfg)), root: t.TempDir()}
	e.relay = testnet.StartRelay(t, e.coord.Addr())
	// node-1's client retries long enough to outlast the cut: its
	// release, sent during it, must reach the coordinator after it.
	e.node1 = failoverStore(t, e.root, "node-1", "http://"+e.relay.Addr(),
		lockclient.WithRequestTimeout(time.Second), lockclient.WithRetryInterval(200*time.Millisecond), lockclient.WithMaxRetries(60))
	e.node2 = failoverStore(t, e.root, "node-2", e.coord.URL())
	return e
}

// failoverStore is nodeID's store on root, coordinated at url, returned
// once synced. Its coordination calls give up after 300 ms.
func failoverStore(t *testing.T, root, nodeID, url string, opts ...lockclient.Option) content.Store {
	t.Helper()
	cs, _ := realStore(t, root, nodeID, url, opts...)
	return cs
}

// openWriter opens node-1's writer of a blob (its pull lock granted) and
// writes it whole.
func (e *failoverEnv) openWriter(t *testing.T, s string) (content.Writer, []byte, digest.Digest) {
	t.Helper()
	data, desc := blob(s)
	w, err := e.node1.Writer(e.ctx, content.WithRef("layer-"+desc.Digest.String()), content.WithDescriptor(desc))
	require.NoError(t, err)
	_, err = w.Write(data)
	require.NoError(t, err)
	return w, data, desc.Digest
}

func (e *failoverEnv) refs(t *testing.T, dgst digest.Digest) []string {
	t.Helper()
	rc, err := e.coord.Core().Refs(e.ctx, dgst.String())
	require.NoError(t, err)
	return rc.Nodes
}

// requireKept checks that node-2's delete of dgst leaves it readable.
func (e *failoverEnv) requireKept(t *testing.T, dgst digest.Digest, data []byte, why string) {
	t.Helper()
	require.NoError(t, e.node2.Delete(e.ctx, dgst))
	got, err := content.ReadBlob(e.ctx, e.node1, ocispecOf(dgst, data))
	require.NoError(t, err, why)
	require.Equal(t, data, got)
}

// awaitCond polls cond every 10 ms until it holds or a minute passed
// (a bound that only ends a hung test; no outcome depends on it).
func awaitCond(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		require.True(t, time.Now().Before(deadline), "waited a minute for %s", what)
		time.Sleep(10 * time.Millisecond)
	}
}

// TestCommitAcrossCoordinatorRestart (docs/design.md §8.17): node-1's
// reference add before the rename meets a failover (cut off, and the
// coordinator restarts: a new epoch, its pull lease adopted). The commit
// completes; while node-1 is cut off another node's delete removes
// nothing; once node-1 reaches the coordinator again its release of the
// pull lock records the reference, and the blob stays.
func TestCommitAcrossCoordinatorRestart(t *testing.T) {
	e := newFailoverEnv(t, lockserver.DefaultConfig())
	w, data, dgst := e.openWriter(t, "committed across a restart ")
	epoch := e.coord.Core().Cluster().Epoch

	e.relay.BlackHole()
	e.coord.Restart()
	require.Greater(t, e.coord.Core().Cluster().Epoch, epoch, "a new epoch")
	require.NoError(t, w.Commit(e.ctx, int64(len(data)), dgst), "the pull must not fail")
	require.NoError(t, w.Close())
	require.Empty(t, e.refs(t, dgst), "not recorded while node-1 is cut off")
	e.requireKept(t, dgst, data, "another node's delete removed the blob while node-1 was cut off")

	e.relay.Heal()
	awaitCond(t, "node-1's reference", func() bool { return len(e.refs(t, dgst)) > 0 })
	require.Equal(t, []string{"node-1"}, e.refs(t, dgst))
	e.requireKept(t, dgst, data, "another node's delete removed a blob node-1 references")
	require.Equal(t, []string{"node-1"}, e.refs(t, dgst))
}

// TestCommitWhoseReleaseNeverArrives (docs/design.md §8.17): the same
// commit, but the coordinator never fails over and node-1's release never
// reaches it, while node-1 stays a synced member (a long session TTL).
// While the pull lease lives another node's delete is refused; once it
// expires, the coordinator has node-1's reference, and the delete is
// refused in use: the blob is never left committed and unreferenced.
func TestCommitWhoseReleaseNeverArrives(t *testing.T) {
	cfg := lockserver.DefaultConfig()
	cfg.SessionTTL = time.Hour
	cfg.LeaseTTL = 5 * time.Second
	e := newFailoverEnv(t, cfg)
	w, data, dgst := e.openWriter(t, "release never arrives ")

	e.relay.BlackHole()
	t.Cleanup(e.relay.Heal) // node-1's store closes after its release gives up
	require.NoError(t, w.Commit(e.ctx, int64(len(data)), dgst), "the pull must not fail")
	require.NoError(t, w.Close())
	require.Empty(t, e.refs(t, dgst))
	e.requireKept(t, dgst, data, "another node's delete removed the blob under node-1's pull lease")

	awaitCond(t, "the pull lease's expiry", func() bool {
		st, err := e.coord.Core().Status(e.ctx, api.OperationPull, dgst.String(), "", "")
		require.NoError(t, err)
		return st.Holder == nil
	})
	e.requireKept(t, dgst, data, "another node's delete removed a blob committed under an expired pull lease")
	require.Equal(t, []string{"node-1"}, e.refs(t, dgst), "the lease's expiry recorded the holder's reference")
}

// ocispecOf is the descriptor of data, whose digest is dgst.
func ocispecOf(dgst digest.Digest, data []byte) ocispec.Descriptor {
	return ocispec.Descriptor{MediaType: ocispec.MediaTypeImageLayer, Digest: dgst, Size: int64(len(data))}
}
