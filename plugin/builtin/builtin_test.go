package builtin_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/containerd/containerd/v2/core/content"
	"github.com/containerd/containerd/v2/plugins"
	"github.com/containerd/plugin"
	"github.com/containerd/plugin/registry"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"github.com/stretchr/testify/require"

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
	ic, p := initPlugin(t, &builtin.Config{Root: root, NodeID: "node-1", LockServer: coord.URL()}, dir)
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
	refs, err := coord.Locker().Refs(ctx, desc.Digest.String())
	require.NoError(t, err)
	require.Equal(t, []string{"node-1"}, refs.Nodes)
	// The journal is in the plugin's state directory (local disk).
	require.DirExists(t, filepath.Join(dir, "state"))
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
		{"no coordinator", builtin.Config{NodeID: "node-1"}, "lock_server is required"},
		{"exposed token file", builtin.Config{NodeID: "node-1", LockServer: coord.URL(), AuthTokenFile: exposed}, "chmod 600"},
		{"bad coordinator URL", builtin.Config{NodeID: "node-1", LockServer: "ftp://coordinator"}, "ftp"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, p := initPlugin(t, &tc.cfg, t.TempDir())
			_, err := p.Instance()
			require.ErrorContains(t, err, tc.err)
		})
	}
}
