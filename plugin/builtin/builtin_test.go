package builtin_test

import (
	"bytes"
	"context"
	"crypto/x509"
	"os"
	"path/filepath"
	"testing"

	"github.com/containerd/containerd/v2/core/content"
	"github.com/containerd/containerd/v2/plugins"
	"github.com/containerd/plugin"
	"github.com/containerd/plugin/registry"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"github.com/pelletier/go-toml/v2"
	"github.com/stretchr/testify/require"

	"github.com/sharedcontent/sharedcontent/internal/testutil/testca"
	"github.com/sharedcontent/sharedcontent/lockserver/lockservertest"
	"github.com/sharedcontent/sharedcontent/plugin/builtin"
)

// registration is the plugin as containerd finds it in its registry.
func registration(t *testing.T) plugin.Registration {
	t.Helper()
	for _, r := range registry.Graph(func(*plugin.Registration) bool { return false }) {
		if r.Type == plugins.ContentPlugin && r.ID == "sharedcontent" {
			return r
		}
	}
	t.Fatal("plugin/builtin registered no content plugin named sharedcontent")
	return plugin.Registration{}
}

// initPlugin initializes the registration as containerd does, with the
// plugin's root and state directories under dir.
func initPlugin(t *testing.T, cfg *builtin.Config, dir string) (*plugin.InitContext, *plugin.Plugin) {
	t.Helper()
	ic := plugin.NewContext(context.Background(), plugin.NewPluginSet(), map[string]string{
		plugins.PropertyRootDir:  filepath.Join(dir, "root"),
		plugins.PropertyStateDir: filepath.Join(dir, "state"),
	})
	ic.Config = cfg
	p := registration(t).Init(ic)
	if s, err := p.Instance(); err == nil {
		t.Cleanup(func() { s.(interface{ Close() error }).Close() })
	}
	return ic, p
}

// TestCompiledIn initializes the compiled-in plugin as containerd would
// and uses the store it returns against a real coordinator: a blob
// written through it lands in the shared root with this node's reference.
func TestCompiledIn(t *testing.T) {
	coord := lockservertest.Start(t)
	dir := t.TempDir()
	root := filepath.Join(dir, "shared")
	ic, p := initPlugin(t, &builtin.Config{Root: root, NodeID: "node-1", Coordinator: coord.URL()}, dir)
	inst, err := p.Instance()
	require.NoError(t, err)
	require.Equal(t, root, ic.Meta.Exports["root"], "containerd's metadata plugin reads the root from the exports")
	cs, ok := inst.(content.Store)
	require.True(t, ok, "the plugin's instance is a content store, got %T", inst)

	ctx := context.Background()
	data := []byte("a layer, compiled in")
	desc := ocispec.Descriptor{MediaType: ocispec.MediaTypeImageLayer, Digest: digest.FromBytes(data), Size: int64(len(data))}
	require.NoError(t, content.WriteBlob(ctx, cs, "layer-1", bytes.NewReader(data), desc))
	require.FileExists(t, filepath.Join(root, "blobs", "sha256", desc.Digest.Encoded()))
	refs, err := coord.Core().Refs(ctx, desc.Digest.String())
	require.NoError(t, err)
	require.Equal(t, []string{"node-1"}, refs.Nodes)
	// The journal is in the plugin's state directory (local disk).
	require.DirExists(t, filepath.Join(dir, "state"))
}

// TestCompiledInNodeIdentity: against a coordinator that requires mTLS and
// names nodes by their certificates, the plugin configured with ca_file,
// node_cert and node_key writes as its node; with another node's
// certificate it is refused.
func TestCompiledInNodeIdentity(t *testing.T) {
	ca := testca.New(t)
	coord := lockservertest.Start(t, lockservertest.WithNodeIdentity(ca))
	files := t.TempDir()
	caFile := testca.WriteFile(t, files, "ca.crt", ca.PEM)
	cert, key := ca.Issue(t, "node-1", x509.ExtKeyUsageClientAuth)
	certFile, keyFile := testca.WriteFile(t, files, "node-1.crt", cert), testca.WriteFile(t, files, "node-1.key", key)

	write := func(nodeID string) error {
		dir := t.TempDir()
		_, p := initPlugin(t, &builtin.Config{Root: filepath.Join(dir, "shared"), NodeID: nodeID, Coordinator: coord.URL(),
			CAFile: caFile, NodeCert: certFile, NodeKey: keyFile}, dir)
		inst, err := p.Instance()
		if err != nil {
			return err
		}
		data := []byte("a layer of " + nodeID)
		desc := ocispec.Descriptor{MediaType: ocispec.MediaTypeImageLayer, Digest: digest.FromBytes(data), Size: int64(len(data))}
		return content.WriteBlob(context.Background(), inst.(content.Store), "layer", bytes.NewReader(data), desc)
	}
	require.NoError(t, write("node-1"))
	nodes, err := coord.Core().Nodes(context.Background())
	require.NoError(t, err)
	require.Len(t, nodes.Nodes, 1)
	require.Equal(t, "node-1", nodes.Nodes[0].NodeID)

	err = write("node-2") // node-1's certificate, acting as node-2
	require.Error(t, err)
	require.ErrorContains(t, err, "forbidden")
}

// TestCompiledInNodeToken: with a coordinator that gives each node its own
// token, node_token_file is this node's, and it takes precedence over
// auth_token_file.
func TestCompiledInNodeToken(t *testing.T) {
	coord := lockservertest.Start(t, lockservertest.WithNodeTokens(map[string]string{"node-1": "token-1", "node-2": "token-2"}))
	files := t.TempDir()
	own := filepath.Join(files, "node-token")
	other := filepath.Join(files, "token")
	require.NoError(t, os.WriteFile(own, []byte("token-1\n"), 0o600))
	require.NoError(t, os.WriteFile(other, []byte("token-2\n"), 0o600))
	dir := t.TempDir()
	_, p := initPlugin(t, &builtin.Config{Root: filepath.Join(dir, "shared"), NodeID: "node-1", Coordinator: coord.URL(),
		AuthTokenFile: other, NodeTokenFile: own}, dir)
	inst, err := p.Instance()
	require.NoError(t, err)
	data := []byte("a layer of node-1")
	desc := ocispec.Descriptor{MediaType: ocispec.MediaTypeImageLayer, Digest: digest.FromBytes(data), Size: int64(len(data))}
	require.NoError(t, content.WriteBlob(context.Background(), inst.(content.Store), "layer", bytes.NewReader(data), desc))
	refs, err := coord.Core().Refs(context.Background(), desc.Digest.String())
	require.NoError(t, err)
	require.Equal(t, []string{"node-1"}, refs.Nodes)
}

// TestCompiledInConfigErrors: a configuration containerd cannot run the
// plugin with fails its initialization with a clear error.
func TestCompiledInConfigErrors(t *testing.T) {
	coord := lockservertest.Start(t)
	exposed := filepath.Join(t.TempDir(), "token")
	require.NoError(t, os.WriteFile(exposed, []byte("s3cret"), 0o644))
	require.NoError(t, os.Chmod(exposed, 0o644))
	for _, tc := range []struct {
		name string
		cfg  builtin.Config
		err  string
	}{
		{"no coordinator", builtin.Config{NodeID: "node-1"}, "coordinator is required"},
		{"exposed token file", builtin.Config{NodeID: "node-1", Coordinator: coord.URL(), AuthTokenFile: exposed}, "chmod 600"},
		{"bad coordinator URL", builtin.Config{NodeID: "node-1", Coordinator: "ftp://coordinator"}, "ftp"},
		{"missing CA file", builtin.Config{NodeID: "node-1", Coordinator: coord.URL(), CAFile: "/nonexistent/ca.crt"}, "coordinator CA"},
		{"certificate without its key", builtin.Config{NodeID: "node-1", Coordinator: coord.URL(), NodeCert: exposed}, "lock client certificate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, p := initPlugin(t, &tc.cfg, t.TempDir())
			_, err := p.Instance()
			require.ErrorContains(t, err, tc.err)
		})
	}
}

// TestCompiledInOldKey: the deprecated key lock_server still names the
// coordinator, and coordinator wins over it.
func TestCompiledInOldKey(t *testing.T) {
	coord := lockservertest.Start(t)
	var cfg builtin.Config
	require.NoError(t, toml.Unmarshal([]byte("lock_server = \""+coord.URL()+"\"\nnode_id = \"node-1\"\n"), &cfg))
	require.Equal(t, coord.URL(), cfg.LockServer)
	dir := t.TempDir()
	root := filepath.Join(dir, "shared")
	cfg.Root = root
	_, p := initPlugin(t, &cfg, dir)
	_, err := p.Instance()
	require.NoError(t, err, "lock_server alone still works")

	cfg = builtin.Config{}
	require.NoError(t, toml.Unmarshal([]byte("coordinator = \""+coord.URL()+"\"\nlock_server = \"ftp://old\"\nnode_id = \"node-2\"\n"), &cfg))
	require.Equal(t, coord.URL(), cfg.Coordinator)
	cfg.Root = root // the cluster's one shared root (docs/design.md §8.19)
	_, p = initPlugin(t, &cfg, t.TempDir())
	_, err = p.Instance()
	require.NoError(t, err, "coordinator wins over lock_server")
}

// TestCompiledInReplicas: the TOML key coordinator takes the URLs of a
// coordinator's replicas; the plugin reaches the leader through a standby
// listed first. A bad list fails the plugin, naming the bad URL.
func TestCompiledInReplicas(t *testing.T) {
	rs := lockservertest.StartReplicas(t, 2)
	dir := t.TempDir()
	root := filepath.Join(dir, "shared")
	_, p := initPlugin(t, &builtin.Config{Root: root, NodeID: "node-1", Coordinator: rs[1].URL() + "," + rs[0].URL()}, dir)
	inst, err := p.Instance()
	require.NoError(t, err)
	ctx := context.Background()
	data := []byte("a layer, through a standby")
	desc := ocispec.Descriptor{MediaType: ocispec.MediaTypeImageLayer, Digest: digest.FromBytes(data), Size: int64(len(data))}
	require.NoError(t, content.WriteBlob(ctx, inst.(content.Store), "layer-1", bytes.NewReader(data), desc))
	refs, err := rs[0].Core().Refs(ctx, desc.Digest.String())
	require.NoError(t, err)
	require.Equal(t, []string{"node-1"}, refs.Nodes, "the leader has the reference")

	dir = t.TempDir()
	_, p = initPlugin(t, &builtin.Config{Root: root, NodeID: "node-1", Coordinator: rs[0].URL() + ",http://"}, dir)
	_, err = p.Instance()
	require.ErrorContains(t, err, `"http://"`)
}
