package contentv2_test

import (
	"context"
	"fmt"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/containerd/containerd/v2/core/content"
	"github.com/containerd/containerd/v2/core/content/testsuite"
	"github.com/containerd/containerd/v2/core/metadata"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"

	"github.com/sharedcontent/sharedcontent/contentv2"
	"github.com/sharedcontent/sharedcontent/contentv2/remote"
	"github.com/sharedcontent/sharedcontent/lockclient"
	"github.com/sharedcontent/sharedcontent/lockserver/lockservertest"
)

// embedded returns a fresh in-process coordinator, as node sees it.
func embedded(t testing.TB, node string) contentv2.Coordinator {
	c, err := lockclient.NewEmbedded(lockservertest.NewCoordinator(t), lockclient.WithNodeID(node))
	require.NoError(t, err)
	return remote.New(c)
}

// TestContentSuiteLibraryMode runs containerd's own content conformance
// suite against a single-node store used directly.
func TestContentSuiteLibraryMode(t *testing.T) {
	testsuite.ContentSuite(t, "contentv2", func(ctx context.Context, root string) (context.Context, content.Store, func() error, error) {
		cs, err := contentv2.NewStore(root, "node-1", embedded(t, "node-1"), contentv2.WithMode(contentv2.LibraryMode), contentv2.WithStateDir(t.TempDir()))
		if err != nil {
			return nil, nil, nil, err
		}
		return ctx, cs, cs.Close, nil
	})
}

// TestContentSuiteBehindMetadata runs the suite the way containerd uses the
// plugin: containerd-mode contentv2 behind containerd's metadata store,
// with the shared content policy (containerd's default).
func TestContentSuiteBehindMetadata(t *testing.T) {
	testsuite.ContentSuite(t, "contentv2-metadata", func(ctx context.Context, root string) (context.Context, content.Store, func() error, error) {
		cs, err := contentv2.NewStore(root, "node-1", embedded(t, "node-1"), contentv2.WithStateDir(t.TempDir()))
		if err != nil {
			return nil, nil, nil, err
		}
		db, err := bolt.Open(filepath.Join(root, "metadata.db"), 0o600, nil)
		if err != nil {
			return nil, nil, nil, err
		}
		var n atomic.Int64
		ctx = testsuite.SetContextWrapper(ctx, func(ctx context.Context, _ bool) (context.Context, func(context.Context) error, error) {
			return namespaces.WithNamespace(ctx, fmt.Sprintf("ns-%d", n.Add(1))), func(context.Context) error { return nil }, nil
		})
		mdb := metadata.NewDB(db, cs, nil)
		if err := mdb.Init(ctx); err != nil {
			return nil, nil, nil, err
		}
		return ctx, mdb.ContentStore(), func() error { cs.Close(); return db.Close() }, nil
	})
}
