package contentv2_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/containerd/containerd/v2/core/content"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/sharedcontent/sharedcontent/contentv2"
	"github.com/sharedcontent/sharedcontent/contentv2/remote"
	"github.com/sharedcontent/sharedcontent/lockclient"
	"github.com/sharedcontent/sharedcontent/lockserver"
	"github.com/sharedcontent/sharedcontent/refcount"
)

// A node's store on the shared root: it writes a blob under the blob's
// pull lock, commits it (recording this node's reference with the
// coordinator) and reads it back. The coordinator runs in process here
// (the embedded mode); a node of a cluster reaches a remote one with
// lockclient.New(url, lockclient.WithNodeID(node)) instead.
func ExampleNewStore() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "contentv2-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)

	coord, err := lockserver.NewCoordinator(lockserver.DefaultConfig(),
		lockserver.Options{Refs: refcount.NewManager(refcount.NewMemoryStorage())})
	if err != nil {
		log.Fatal(err)
	}
	defer coord.Close()
	client, err := lockclient.NewEmbedded(coord, lockclient.WithNodeID("node-1"))
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()

	store, err := contentv2.NewStore(filepath.Join(dir, "shared"), "node-1", remote.New(client),
		contentv2.WithStateDir(filepath.Join(dir, "state")))
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()

	blob := []byte("hello, shared content\n")
	desc := ocispec.Descriptor{MediaType: ocispec.MediaTypeImageLayer, Digest: digest.FromBytes(blob), Size: int64(len(blob))}
	w, err := store.Writer(ctx, content.WithRef("example"), content.WithDescriptor(desc))
	if err != nil {
		log.Fatal(err)
	}
	defer w.Close()
	if _, err := w.Write(blob); err != nil {
		log.Fatal(err)
	}
	if err := w.Commit(ctx, desc.Size, desc.Digest); err != nil {
		log.Fatal(err)
	}

	got, err := content.ReadBlob(ctx, store, desc)
	if err != nil {
		log.Fatal(err)
	}
	refs, err := coord.Refs(ctx, desc.Digest.String())
	if err != nil {
		log.Fatal(err)
	}
	fmt.Print(string(got))
	fmt.Println("referenced by", refs.Nodes)
	// Output:
	// hello, shared content
	// referenced by [node-1]
}
