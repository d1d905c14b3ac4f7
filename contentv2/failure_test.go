package contentv2_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/containerd/containerd/v2/core/content"
	"github.com/containerd/errdefs"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/sharedcontent/sharedcontent/contentv2"
	"github.com/sharedcontent/sharedcontent/contentv2/remote"
	"github.com/sharedcontent/sharedcontent/lockclient"
	"github.com/sharedcontent/sharedcontent/lockserver"
	"github.com/sharedcontent/sharedcontent/lockserver/api"
	"github.com/sharedcontent/sharedcontent/lockserver/lockservertest"
)

func blob(s string) ([]byte, ocispec.Descriptor) {
	b := bytes.Repeat([]byte(s), 1000)
	return b, ocispec.Descriptor{MediaType: ocispec.MediaTypeImageLayer, Digest: digest.FromBytes(b), Size: int64(len(b))}
}

func blobFile(root string, d digest.Digest) string {
	return filepath.Join(root, "blobs", d.Algorithm().String(), d.Encoded())
}

// TestUnreachableCoordinator: with the coordinator of its cluster down, a
// member node's write waits (ErrUnavailable, so containerd retries) until
// its session has surely expired, then proceeds (fail-open) and is
// journaled; a delete removes nothing (fail-closed). Once the server is
// up again, the node syncs and the coordinator has the uses made while it
// was down.
func TestUnreachableCoordinator(t *testing.T) {
	const ttl = failOpenTTL
	cfg := lockserver.DefaultConfig()
	cfg.SessionTTL = ttl
	coord := lockservertest.Start(t, lockservertest.WithConfig(cfg))
	client, err := lockclient.New(coord.URL(), lockclient.WithNodeID("node-1"),
		lockclient.WithMaxRetries(1), lockclient.WithRetryInterval(10*time.Millisecond))
	require.NoError(t, err)
	root := t.TempDir()
	reg := prometheus.NewRegistry()
	cs := failOpenStore(t, root, "node-1", client, contentv2.WithRegisterer(reg))
	ctx := context.Background()
	id, err := contentv2.ReadClusterID(root)
	require.NoError(t, err)
	require.Equal(t, coord.Core().Cluster().ClusterID, id, "the first node records the root's cluster")
	// Only a member fails open: wait for its first sync to complete (its
	// last chunk may come late on a loaded machine, and then the next
	// round syncs again).
	awaitSynced(t, reg)

	coord.Stop()
	start := time.Now()
	data, desc := blob("fail-open ")
	write := func() error {
		return content.WriteBlob(ctx, cs, "layer-"+desc.Digest.String(), bytes.NewReader(data), desc)
	}
	_, err = cs.Writer(ctx, content.WithRef("layer-"+desc.Digest.String()), content.WithDescriptor(desc))
	require.ErrorIs(t, err, errdefs.ErrUnavailable, "no uncoordinated write while the session may be live")
	require.ErrorContains(t, err, "once this node's session has surely expired")
	require.NoFileExists(t, blobFile(root, desc.Digest))
	// content.WriteBlob retries ErrUnavailable with backoff, as containerd's
	// fetch does.
	require.NoError(t, write())
	// The rule itself, from the times the store recorded: the first
	// uncoordinated use came FailOpenDelay after the last renewal it
	// sent, however late the renewals ran on a loaded machine.
	sent := gauge(t, reg, "sharedcontent_store_session_renewal_sent_timestamp_seconds")
	since := gauge(t, reg, "sharedcontent_store_fail_open_since_timestamp_seconds")
	require.Positive(t, sent)
	require.Positive(t, since, "the store records when it failed open")
	require.GreaterOrEqual(t, since-sent, contentv2.FailOpenDelay(ttl).Seconds()-1e-6,
		"the fail-open write waited out the session counted from the last renewal sent")
	require.FileExists(t, blobFile(root, desc.Digest), "the write went ahead")
	t.Logf("first uncoordinated write %s after the coordinator stopped, %.3f s after the last renewal sent",
		time.Since(start), since-sent)

	require.NoError(t, cs.Delete(ctx, desc.Digest), "an unreachable coordinator is not a GC error")
	require.FileExists(t, blobFile(root, desc.Digest), "nothing is deleted without the coordinator")
	other, odesc := blob("second ")
	require.NoError(t, content.WriteBlob(ctx, cs, "layer-"+odesc.Digest.String(), bytes.NewReader(other), odesc))

	// The coordinator comes back; the node syncs its journal.
	coord.Start()
	require.Eventually(t, func() bool {
		refs, err := coord.Core().Refs(ctx, odesc.Digest.String())
		return err == nil && refs.Count == 1 && refs.Nodes[0] == "node-1"
	}, 10*time.Second, 20*time.Millisecond, "the use made while the coordinator was down is recorded")
}

// TestNeverJoinedNodeDoesNotFailOpen: a node whose coordinator has never
// accepted a session of it is no member: no delete would wait for it, so
// it uses no blob without the coordinator, however long the coordinator
// stays unreachable. Once the coordinator answers, the node joins and
// writes.
func TestNeverJoinedNodeDoesNotFailOpen(t *testing.T) {
	addr := lockservertest.FreeAddr(t) // nothing listens there for now
	client, err := lockclient.New("http://"+addr, lockclient.WithNodeID("node-1"),
		lockclient.WithMaxRetries(1), lockclient.WithRetryInterval(10*time.Millisecond))
	require.NoError(t, err)
	root := t.TempDir()
	start := time.Now()
	cs := failOpenStore(t, root, "node-1", client)
	ctx := context.Background()
	data, desc := blob("never joined ")
	requireNoFailOpen(t, cs, root, desc, start, func(err error) {
		require.ErrorIs(t, err, errdefs.ErrUnavailable)
		require.ErrorContains(t, err, "never joined the cluster of its root")
	})

	coord := lockservertest.Start(t, lockservertest.WithAddr(addr))
	require.NoError(t, content.WriteBlob(ctx, cs, "layer-"+desc.Digest.String(), bytes.NewReader(data), desc))
	refs, err := coord.Core().Refs(ctx, desc.Digest.String())
	require.NoError(t, err)
	require.Equal(t, []string{"node-1"}, refs.Nodes)
}

// TestRefusedIdentityRefusesToStart: a coordinator that answers and
// refuses the node's credentials at start (a token of another node) is no
// outage: the store refuses to open, says why and what to fix, and writes
// nothing into the root, as a node pointed at the wrong cluster does.
// Before, it opened, logged that writes and deletes wait, and a daemon
// reported ready.
func TestRefusedIdentityRefusesToStart(t *testing.T) {
	coord := lockservertest.Start(t, lockservertest.WithNodeTokens(map[string]string{"node-1": "token-1", "node-2": "token-2"}))
	client, err := lockclient.New(coord.URL(), lockclient.WithNodeID("node-2"), lockclient.WithBearerToken("token-1"),
		lockclient.WithMaxRetries(1), lockclient.WithRetryInterval(10*time.Millisecond))
	require.NoError(t, err)
	root := t.TempDir()
	cs, err := contentv2.NewStore(root, "node-2", remote.New(client), contentv2.WithStateDir(t.TempDir()),
		contentv2.WithSessionTTL(failOpenTTL))
	if err == nil {
		cs.Close()
	}
	require.Error(t, err)
	require.True(t, errdefs.IsPermissionDenied(err), "%v", err)
	require.ErrorContains(t, err, "refusing to start")
	require.ErrorContains(t, err, "give this node its own credentials")
	_, err = os.Stat(filepath.Join(root, contentv2.MetaDir))
	require.ErrorIs(t, err, fs.ErrNotExist, "a refused node writes nothing into the root")
	nodes, err := coord.Core().Nodes(context.Background())
	require.NoError(t, err)
	require.Empty(t, nodes.Nodes, "a refused node is no member")
}

// failOpenTTL is the session TTL of the fail-open tests: a member goes
// ahead contentv2.FailOpenDelay(failOpenTTL) after its last renewal.
const failOpenTTL = 100 * time.Millisecond

// failOpenStore is a store of nodeID on root, coordinated through client,
// with the fail-open tests' session TTL.
func failOpenStore(t *testing.T, root, nodeID string, client *lockclient.Client, opts ...contentv2.Option) content.Store {
	t.Helper()
	cs, err := contentv2.NewStore(root, nodeID, remote.New(client), append([]contentv2.Option{contentv2.WithStateDir(t.TempDir()),
		contentv2.WithRefRetryInterval(50 * time.Millisecond), contentv2.WithSessionTTL(failOpenTTL)}, opts...)...)
	require.NoError(t, err)
	t.Cleanup(func() { cs.Close() })
	return cs
}

// requireNoFailOpen asks cs for a writer of desc, every 100 ms, until a
// second after a member started at start would have gone ahead, checks
// each refusal with check, and that nothing was written. The property is
// one of time (no fail-open however long), so the test lets time pass.
func requireNoFailOpen(t *testing.T, cs content.Store, root string, desc ocispec.Descriptor, start time.Time, check func(error)) {
	t.Helper()
	for time.Since(start) < contentv2.FailOpenDelay(failOpenTTL)+time.Second {
		_, err := cs.Writer(context.Background(), content.WithRef("layer-"+desc.Digest.String()), content.WithDescriptor(desc))
		require.Error(t, err)
		check(err)
		time.Sleep(100 * time.Millisecond)
	}
	require.NoFileExists(t, blobFile(root, desc.Digest))
}

// lostLease wraps a coordinator whose locks are lost before they are
// released, as after a coordinator restart or a lease that expired during
// a long download.
type lostLease struct{ contentv2.Coordinator }

func (c lostLease) Lock(ctx context.Context, req api.LockRequest) (contentv2.Lock, error) {
	lk, err := c.Coordinator.Lock(ctx, req)
	if err != nil {
		return nil, err
	}
	return lostLock{lk}, nil
}

type lostLock struct{ contentv2.Lock }

var errLost = errors.New("lease lost")

func (lostLock) Unlock(context.Context, bool, error) error { return errLost }
func (lostLock) Check(context.Context) error               { return errLost }
func (lostLock) HeldUntil() time.Time                      { return time.Time{} }

// TestLostLeaseStillRecordsReference (docs/design.md §8.14): the reference
// is recorded before the blob is renamed into blobs/, so a lost lease does
// not leave a committed blob without its reference.
func TestLostLeaseStillRecordsReference(t *testing.T) {
	l := lockservertest.NewCoordinator(t)
	client, err := lockclient.NewEmbedded(l, lockclient.WithNodeID("node-1"))
	require.NoError(t, err)
	root := t.TempDir()
	cs, err := contentv2.NewStore(root, "node-1", lostLease{remote.New(client)}, contentv2.WithStateDir(t.TempDir()))
	require.NoError(t, err)
	defer cs.Close()
	ctx := context.Background()
	data, desc := blob("lost lease ")
	require.NoError(t, content.WriteBlob(ctx, cs, "layer-"+desc.Digest.String(), bytes.NewReader(data), desc))
	refs, err := l.Refs(ctx, desc.Digest.String())
	require.NoError(t, err)
	require.Equal(t, []string{"node-1"}, refs.Nodes, "the download is kept and referenced")
	_, err = os.Stat(blobFile(root, desc.Digest))
	require.NoError(t, err)

	// A delete whose lock is lost before the removal removes nothing.
	require.NoError(t, cs.Delete(ctx, desc.Digest))
	require.FileExists(t, blobFile(root, desc.Digest), "no removal without a confirmed delete lock")
}

// awaitSynced waits until the store whose metrics reg holds reports its
// session synced, polling the gauge (the store offers no event for it).
func awaitSynced(t *testing.T, reg *prometheus.Registry) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for gauge(t, reg, "sharedcontent_store_synced") != 1 {
		require.True(t, time.Now().Before(deadline), "the node never synced")
		time.Sleep(10 * time.Millisecond)
	}
}

// gauge returns the value of the gauge name in reg (0 if unregistered).
func gauge(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	return 0
}

// stolenID is a coordinator that, once stolen is set, refuses this node's
// session because another live instance uses its node ID, and cannot be
// reached for anything else.
type stolenID struct {
	contentv2.Coordinator
	stolen atomic.Bool
}

func (c *stolenID) Session(ctx context.Context, req contentv2.SessionRequest) (contentv2.SessionInfo, error) {
	if c.stolen.Load() {
		return contentv2.SessionInfo{}, fmt.Errorf("node id %q is in use by another live instance: %w", "node-1", api.ErrDuplicateNode)
	}
	return c.Coordinator.Session(ctx, req)
}

func (c *stolenID) Lock(ctx context.Context, req api.LockRequest) (contentv2.Lock, error) {
	if c.stolen.Load() {
		return nil, fmt.Errorf("coordinator: connection refused: %w", errdefs.ErrUnavailable)
	}
	return c.Coordinator.Lock(ctx, req)
}

// TestDuplicateNodeDoesNotFailOpen (docs/design.md §8.5): a running node
// whose session the coordinator refuses because another live instance
// uses its node ID never uses a blob without the coordinator, however long
// that lasts, and says why.
func TestDuplicateNodeDoesNotFailOpen(t *testing.T) {
	l := lockservertest.NewCoordinator(t)
	client, err := lockclient.NewEmbedded(l, lockclient.WithNodeID("node-1"))
	require.NoError(t, err)
	root := t.TempDir()
	coord := &stolenID{Coordinator: remote.New(client)}
	reg := prometheus.NewRegistry()
	cs, err := contentv2.NewStore(root, "node-1", coord, contentv2.WithStateDir(t.TempDir()),
		contentv2.WithSessionTTL(failOpenTTL), contentv2.WithRegisterer(reg))
	require.NoError(t, err)
	defer cs.Close()

	coord.stolen.Store(true)
	require.Eventually(t, func() bool { return counter(t, reg, "sharedcontent_store_session_refusals_total") > 0 },
		10*time.Second, 10*time.Millisecond, "the session loop meets the refusal")
	start := time.Now()
	_, desc := blob("stolen id ")
	requireNoFailOpen(t, cs, root, desc, start, func(err error) {
		require.ErrorIs(t, err, api.ErrDuplicateNode)
		require.ErrorContains(t, err, "--node-id")
	})
}

// counter returns the sum of the counter name in reg over its series.
func counter(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return sum
}
