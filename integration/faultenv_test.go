package integration

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/containerd/containerd/v2/core/content"
	"github.com/containerd/errdefs"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/sharedcontent/sharedcontent/contentv2"
	"github.com/sharedcontent/sharedcontent/contentv2/contentv2test"
	"github.com/sharedcontent/sharedcontent/contentv2/remote"
	"github.com/sharedcontent/sharedcontent/internal/testutil/logbuf"
	"github.com/sharedcontent/sharedcontent/internal/testutil/registry"
	"github.com/sharedcontent/sharedcontent/lockclient"
	"github.com/sharedcontent/sharedcontent/lockserver"
	"github.com/sharedcontent/sharedcontent/lockserver/api"
	"github.com/sharedcontent/sharedcontent/lockserver/lockservertest"
)

// The fault tests (docs/design.md §8) run nodes the way faultEnv builds
// them: each an in-process containerd metadata store over a contentv2
// store on one shared root, reaching a real coordinator on a fixed
// loopback address through a TCP proxy of its own, so that a test can
// stop, restart and wipe the coordinator and cut off one node.

// faultSessionTTL is the coordinator's session TTL in the fault tests: a
// node cut off uses blobs unregistered contentv2.FailOpenDelay(TTL) after
// its last renewal (about 2.5 s).
const faultSessionTTL = 400 * time.Millisecond

func faultConfig() lockserver.Config {
	cfg := lockserver.DefaultConfig()
	cfg.SessionTTL = faultSessionTTL
	// A lease lost with its holder (cut off, or its request abandoned)
	// delays the others this long.
	cfg.LeaseTTL = time.Second
	// The tests run their reapers' passes with no grace
	// (contentv2.WithReaper(0, 0)); the coordinator checks none either.
	cfg.ReapGrace = 0
	return cfg
}

// coordinator is the harness's coordinator (on a fixed loopback address,
// stopped, restarted and wiped by the tests) with an operator's client.
type coordinator struct {
	*lockservertest.Server
	admin *lockclient.Client // operator's client: no session, so not a member
}

func startCoordinator(t testing.TB, cfg lockserver.Config) *coordinator {
	t.Helper()
	c := &coordinator{Server: lockservertest.Start(t, lockservertest.WithConfig(cfg))}
	var err error
	c.admin, err = lockclient.New(c.URL(), lockclient.WithNodeID("operator"),
		lockclient.WithMaxRetries(2), lockclient.WithRetryInterval(50*time.Millisecond))
	require.NoError(t, err)
	t.Cleanup(func() { c.admin.Close() })
	return c
}

// Cluster is the running coordinator's identity.
func (c *coordinator) Cluster() api.Cluster { return c.Core().Cluster() }

// Adopt makes the coordinator take the shared root's cluster and members,
// as `sharedcontentctl cluster adopt --root` does.
func (c *coordinator) Adopt(ctx context.Context, root string) (api.Cluster, error) {
	id, err := contentv2.ReadClusterID(root)
	if err != nil {
		return api.Cluster{}, err
	}
	nodes, err := contentv2.NodeMarkers(root)
	if err != nil {
		return api.Cluster{}, err
	}
	return c.admin.Adopt(ctx, api.AdoptRequest{ClusterID: id, Nodes: nodes})
}

// Refs returns the nodes the coordinator records as users of d, sorted.
func (c *coordinator) Refs(ctx context.Context, d digest.Digest) ([]string, error) {
	r, err := c.admin.Refs(ctx, d.String())
	if err != nil {
		return nil, err
	}
	out := slices.Clone(r.Nodes)
	slices.Sort(out)
	return out, nil
}

// allSynced reports whether every member is live and synced and each of
// ids is a member (GET /nodes).
func (c *coordinator) allSynced(ctx context.Context, ids ...string) bool {
	resp, err := c.admin.Nodes(ctx)
	if err != nil {
		return false
	}
	seen := map[string]bool{}
	for _, n := range resp.Nodes {
		if !n.Live || !n.Synced {
			return false
		}
		seen[n.NodeID] = true
	}
	for _, id := range ids {
		if !seen[id] {
			return false
		}
	}
	return true
}

// waitSynced waits until GET /nodes shows every member synced, ids
// included.
func (c *coordinator) waitSynced(t testing.TB, ids ...string) {
	t.Helper()
	require.Eventually(t, func() bool { return c.allSynced(context.Background(), ids...) },
		20*time.Second, 20*time.Millisecond, "every member synced (%v)", ids)
}

// waitSynced waits until the coordinator shows every member synced, ids
// included (coordinator.waitSynced), and each running node of ids knows
// it: its own sharedcontent_store_synced is 1, set once the answer that
// completed its sync arrived and its journal recorded it as a member.
// The coordinator marks a node synced before that answer reaches it; a
// test that cuts a node off right after coordinator.waitSynced may lose
// the answer, and the node then does not know it was a member (it cannot
// tell, later, that it was forgotten).
func (e *faultEnv) waitSynced(t testing.TB, ids ...string) {
	t.Helper()
	require.Eventually(t, func() bool {
		if !e.coord.allSynced(context.Background(), ids...) {
			return false
		}
		for _, n := range e.nodes {
			if n.Up() && slices.Contains(ids, n.id) && n.counter("sharedcontent_store_synced") != 1 {
				return false
			}
		}
		return true
	}, 20*time.Second, 20*time.Millisecond, "every member synced, and %v know it", ids)
}

// faultNode is one node of a faultEnv: its containerd metadata and store,
// its lock client, and its own way (a proxy) to the coordinator.
type faultNode struct {
	*contentv2test.Node // nil while the node is down
	id                  string
	stateDir            string
	root                string // the node's path to the shared root ("": the env's)
	proxy               *netProxy
	client              *lockclient.Client
	metrics             *prometheus.Registry
	opts                []contentv2.Option
	clientOpts          []lockclient.Option
	env                 *faultEnv
}

// faultEnv is a registry, a coordinator and nodes sharing one root.
type faultEnv struct {
	t     testing.TB
	root  string
	coord *coordinator
	reg   *registry.Registry
	nodes []*faultNode
}

func newFaultEnv(t testing.TB, cfg lockserver.Config) *faultEnv {
	t.Helper()
	logbuf.ShowOnFailure(t) // first: the registry's and nodes' cleanups log into it too
	reg, err := registry.Start()
	require.NoError(t, err)
	t.Cleanup(func() { reg.Close() })
	return &faultEnv{t: t, root: t.TempDir(), coord: startCoordinator(t, cfg), reg: reg}
}

// push pushes a small random image (each pushed image has its own blobs).
func (e *faultEnv) push(name string) registry.Image {
	e.t.Helper()
	img, err := e.reg.PushRandom(context.Background(), "test/"+name+":v1", 2, 16<<10)
	require.NoError(e.t, err)
	return img
}

// nodeOptions are every fault node's store options; opts are added.
func nodeOptions(opts ...contentv2.Option) []contentv2.Option {
	return append([]contentv2.Option{
		contentv2.WithSessionTTL(faultSessionTTL),
		contentv2.WithRefRetryInterval(50 * time.Millisecond),
	}, opts...)
}

// addNode starts a node.
func (e *faultEnv) addNode(id string, opts ...contentv2.Option) *faultNode {
	e.t.Helper()
	return e.addNodeClient(id, nil, opts...)
}

// addNodeClient starts a node whose lock client has clientOpts too.
func (e *faultEnv) addNodeClient(id string, clientOpts []lockclient.Option, opts ...contentv2.Option) *faultNode {
	e.t.Helper()
	n, err := e.startNode(id, clientOpts, opts...)
	require.NoError(e.t, err)
	return n
}

// startNode starts a node, or returns why it refused to.
func (e *faultEnv) startNode(id string, clientOpts []lockclient.Option, opts ...contentv2.Option) (*faultNode, error) {
	n := &faultNode{id: id, stateDir: e.t.TempDir(), proxy: startProxy(e.t, e.coord.Addr()),
		opts: nodeOptions(opts...), clientOpts: clientOpts, env: e}
	e.t.Cleanup(n.Close)
	if err := n.Open(); err != nil {
		return nil, err
	}
	e.nodes = append(e.nodes, n)
	return n, nil
}

// Open starts the node's plugin: its store (journal in its state dir) and
// containerd metadata.
func (n *faultNode) Open() error {
	client, err := lockclient.New(n.proxy.URL(), append([]lockclient.Option{lockclient.WithNodeID(n.id),
		lockclient.WithMaxRetries(1), lockclient.WithRetryInterval(20 * time.Millisecond),
		lockclient.WithRequestTimeout(5 * time.Second)}, n.clientOpts...)...)
	if err != nil {
		return err
	}
	reg := prometheus.NewRegistry()
	opts := append(slices.Clone(n.opts), contentv2.WithRegisterer(reg))
	root := n.root
	if root == "" {
		root = n.env.root
	}
	cn, err := contentv2test.NewNode(context.Background(), n.id, root, n.stateDir, remote.New(client), opts...)
	if err != nil {
		client.Close()
		return err
	}
	n.Node, n.client, n.metrics = cn, client, reg
	return nil
}

// Close stops the node's plugin (its store and metadata); Open starts it
// again with the same state.
func (n *faultNode) Close() {
	if n.Node == nil {
		return
	}
	n.Node.Close()
	n.client.Close()
	n.Node = nil
}

// Up reports whether the node's plugin runs.
func (n *faultNode) Up() bool { return n.Node != nil }

// counter returns the sum of the node's metric name over the series whose
// labels include labels ("name", "value" pairs).
func (n *faultNode) counter(name string, labels ...string) float64 {
	mfs, err := n.metrics.Gather()
	if err != nil {
		return -1
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	series:
		for _, m := range mf.GetMetric() {
			for i := 0; i+1 < len(labels); i += 2 {
				found := false
				for _, lp := range m.GetLabel() {
					if lp.GetName() == labels[i] && lp.GetValue() == labels[i+1] {
						found = true
					}
				}
				if !found {
					continue series
				}
			}
			if c := m.GetCounter(); c != nil {
				sum += c.GetValue()
			} else if g := m.GetGauge(); g != nil {
				sum += g.GetValue()
			}
		}
	}
	return sum
}

// pullImage pulls img into n (an image record, as ctr does) within d.
func (n *faultNode) pullImage(d time.Duration, img registry.Image) error {
	ctx, cancel := context.WithTimeout(nsContext(), d)
	defer cancel()
	_, err := n.PullImage(ctx, img.Ref)
	return err
}

// collect runs containerd's garbage collector on the node as a node that
// has just removed something does: a throwaway blob (written without a
// digest in its ref, so without a pull lock) is garbage, so the collection
// sweeps the content store, offering every blob of the shared directory
// that this node's metadata does not record to the store's Delete. Its
// commit is referenced like any (docs/design.md §8.1), so while the node
// may not use blobs unregistered (the coordinator unreachable, not yet
// failing open) it fails and is left out: the collection then sweeps only
// if the node's metadata dropped something else (a removed image).
func (n *faultNode) collect(ctx context.Context) error {
	var b [8]byte
	_, _ = rand.Read(b[:])
	junk := []byte("junk " + n.id + " " + hex.EncodeToString(b[:]))
	w, err := content.OpenWriter(ctx, n.CS, content.WithRef("junk-"+hex.EncodeToString(b[:])))
	if err != nil {
		return fmt.Errorf("junk writer: %w", err)
	}
	if _, err := w.Write(junk); err != nil {
		w.Close()
		return err
	}
	if err := w.Commit(ctx, int64(len(junk)), digest.FromBytes(junk)); err != nil {
		w.Close()
		if !errdefs.IsUnavailable(err) {
			return fmt.Errorf("junk commit: %w", err)
		}
		_ = n.CS.Abort(ctx, "junk-"+hex.EncodeToString(b[:]))
	}
	w.Close()
	_, err = n.DB.GarbageCollect(ctx)
	return err
}

// unreadable checks what a user checks with `ctr content get`: every blob
// the node's containerd metadata records is read back, through the
// metadata store, from the shared directory, and its digest verified. It
// returns one line per blob that fails.
func unreadable(ctx context.Context, n *contentv2test.Node) []string {
	var infos []content.Info
	if err := n.CS.Walk(ctx, func(info content.Info) error {
		infos = append(infos, info)
		return nil
	}); err != nil {
		return []string{fmt.Sprintf("%s: walking its metadata: %v", n.ID, err)}
	}
	var bad []string
	for _, info := range infos {
		desc := ocispec.Descriptor{Digest: info.Digest, Size: info.Size}
		if err := readVerify(ctx, n.CS, desc); err != nil {
			bad = append(bad, fmt.Sprintf("%s: blob %s (%d bytes) recorded in its metadata: %v", n.ID, info.Digest, info.Size, err))
		}
	}
	return bad
}

func readVerify(ctx context.Context, p content.Provider, desc ocispec.Descriptor) error {
	ra, err := p.ReaderAt(ctx, desc)
	if err != nil {
		return err
	}
	defer ra.Close()
	v := desc.Digest.Verifier()
	n, err := io.Copy(v, content.NewReader(ra))
	if err != nil {
		return err
	}
	if n != desc.Size || !v.Verified() {
		return fmt.Errorf("read %d bytes that do not match the digest", n)
	}
	return nil
}

// requireReadable fails unless every blob each node's metadata records is
// readable intact.
func requireReadable(t testing.TB, ctx context.Context, nodes ...*faultNode) {
	t.Helper()
	var bad []string
	for _, n := range nodes {
		bad = append(bad, unreadable(ctx, n.Node)...)
	}
	require.Empty(t, bad, "blobs recorded in containerd's metadata that cannot be read back")
}

// requireImage fails unless every blob of img is recorded in n's metadata
// and readable intact.
func requireImage(t testing.TB, ctx context.Context, n *contentv2test.Node, img registry.Image) {
	t.Helper()
	for _, d := range img.Descriptors() {
		_, err := n.CS.Info(ctx, d.Digest)
		require.NoError(t, err, "node %s does not record blob %s of %s", n.ID, d.Digest, img.Ref)
		require.NoError(t, readVerify(ctx, n.CS, d), "node %s: blob %s of %s", n.ID, d.Digest, img.Ref)
	}
}

// requireFiles fails unless every blob of img is a file in the shared
// root.
func (e *faultEnv) requireFiles(t testing.TB, img registry.Image, why string) {
	t.Helper()
	for _, d := range img.Blobs() {
		require.FileExists(t, blobPath(e.root, d), "%s: blob of %s", why, img.Ref)
	}
}

// requireRefs fails unless the coordinator records exactly nodes as the
// users of every blob of img.
func (e *faultEnv) requireRefs(t testing.TB, ctx context.Context, img registry.Image, nodes ...string) {
	t.Helper()
	slices.Sort(nodes)
	for _, d := range img.Descriptors() {
		got, err := e.coord.Refs(ctx, d.Digest)
		require.NoError(t, err)
		require.Equal(t, nodes, got, "users of %s (%s) at the coordinator", d.Digest, img.Ref)
	}
}

// blobFiles lists the blob files of the shared root.
func (e *faultEnv) blobFiles() []string {
	var out []string
	_ = filepath.WalkDir(filepath.Join(e.root, "blobs"), func(p string, d os.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			out = append(out, p)
		}
		return nil
	})
	return out
}

// isWrongCluster reports whether err is a node's refusal to start on a
// root of another cluster.
func isWrongCluster(err error) bool { return errors.Is(err, api.ErrWrongCluster) }

// requireRefsOf fails unless the coordinator records exactly nodes as the
// users of d.
func (e *faultEnv) requireRefsOf(t testing.TB, ctx context.Context, d digest.Digest, nodes ...string) {
	t.Helper()
	slices.Sort(nodes)
	got, err := e.coord.Refs(ctx, d)
	require.NoError(t, err)
	require.Equal(t, nodes, got, "users of %s at the coordinator", d)
}
