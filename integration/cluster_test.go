package integration

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/containerd/containerd/v2/core/content"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"github.com/stretchr/testify/require"

	"github.com/sharedcontent/sharedcontent/contentv2"
	"github.com/sharedcontent/sharedcontent/contentv2/contentv2test"
	"github.com/sharedcontent/sharedcontent/contentv2/remote"
	"github.com/sharedcontent/sharedcontent/internal/testutil/registry"
	"github.com/sharedcontent/sharedcontent/lockclient"
	"github.com/sharedcontent/sharedcontent/lockserver/lockservertest"
)

// node is an in-process containerd node with its lock client.
type node struct {
	*contentv2test.Node
	client *lockclient.Client
}

// testCluster is a real coordinator on loopback and nodes sharing one
// content directory.
type testCluster struct {
	root  string
	url   string
	nodes []*node
}

func newCluster(t *testing.T, n int, opts ...contentv2.Option) *testCluster {
	t.Helper()
	c := &testCluster{root: t.TempDir()}
	c.url = lockservertest.Start(t).URL()
	for i := range n {
		c.nodes = append(c.nodes, c.addNode(t, fmt.Sprintf("node-%d", i+1), opts...))
	}
	return c
}

func (c *testCluster) addNode(t *testing.T, id string, opts ...contentv2.Option) *node {
	client, err := lockclient.New(c.url, lockclient.WithNodeID(id))
	require.NoError(t, err)
	n, err := contentv2test.NewNode(context.Background(), id, c.root, t.TempDir(), remote.New(client), opts...)
	require.NoError(t, err)
	t.Cleanup(func() { n.Close() })
	return &node{Node: n, client: client}
}

func nsContext() context.Context { return contentv2test.Context(context.Background()) }

func pull(ctx context.Context, cs content.Store, ref string) (ocispec.Descriptor, error) {
	return contentv2test.Pull(ctx, cs, ref, contentv2test.PullOptions{})
}

// pullAll pulls ref on every node at once and returns each node's error.
func (c *testCluster) pullAll(ctx context.Context, ref string, opts contentv2test.PullOptions) []error {
	errs := make([]error, len(c.nodes))
	var wg sync.WaitGroup
	for i, n := range c.nodes {
		wg.Go(func() { _, errs[i] = contentv2test.Pull(ctx, n.CS, ref, opts) })
	}
	wg.Wait()
	return errs
}

// requireIntact reads every blob of img back through each node.
func requireIntact(t *testing.T, ctx context.Context, nodes []*node, img registry.Image) {
	t.Helper()
	for _, n := range nodes {
		for _, d := range img.Descriptors() {
			b, err := content.ReadBlob(ctx, n.CS, d)
			require.NoError(t, err, "node %s blob %s", n.ID, d.Digest)
			require.Equal(t, d.Digest, digest.FromBytes(b), "node %s blob %s corrupted", n.ID, d.Digest)
		}
	}
}
