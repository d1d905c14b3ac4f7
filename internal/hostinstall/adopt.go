package hostinstall

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/containerd/containerd/v2/core/content"
	"github.com/containerd/containerd/v2/core/content/proxy"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/errdefs"
	"github.com/containerd/log"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sharedcontent/sharedcontent/plugin"
)

// DefaultContainerdRoot is containerd's root on the host.
const DefaultContainerdRoot = "/var/lib/containerd"

// localBlobs is containerd's own content store's blob directory, under
// its root.
const localBlobs = "io.containerd.content.v1.content/blobs/sha256"

// adoptLocalContent writes every blob of containerd's own content store
// into the shared store through the host daemon's socket, before
// containerd is switched to it. containerd keeps its records of the
// images it pulled on its own store (the sandbox image, this chart's
// image); without their blobs in the shared store it could neither read
// them nor pull them again (its metadata says the blobs exist, so a pull
// fetches nothing and unpacking fails with "not found"), and no new pod
// could start. Blobs the shared store has already are skipped; the
// local store is left as it is (helm uninstall switches back to it).
func adoptLocalContent(ctx context.Context, hostRoot, containerdRoot, socket string) (adopted int, err error) {
	dir := filepath.Join(hostRoot, containerdRoot, localBlobs)
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("containerd's own content store: %w", err)
	}
	conn, err := grpc.NewClient("unix://"+filepath.Join(hostRoot, socket),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(plugin.MaxMsgSize), grpc.MaxCallSendMsgSize(plugin.MaxMsgSize)))
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	store := proxy.NewContentStore(conn)
	ctx = namespaces.WithNamespace(ctx, "k8s.io")
	for _, e := range ents {
		dgst := digest.NewDigestFromEncoded(digest.SHA256, e.Name())
		if dgst.Validate() != nil || !e.Type().IsRegular() {
			continue
		}
		ok, err := adoptBlob(ctx, store, filepath.Join(dir, e.Name()), dgst)
		if err != nil {
			return adopted, fmt.Errorf("adopting %s from containerd's own content store: %w", dgst, err)
		}
		if ok {
			adopted++
		}
	}
	log.G(ctx).WithField("blobs", adopted).WithField("dir", filepath.Join(containerdRoot, localBlobs)).Info("containerd's own content adopted into the shared store")
	return adopted, nil
}

// adoptBlob writes the blob at path into store, unless store has it; it
// reports whether it wrote it.
func adoptBlob(ctx context.Context, store content.Store, path string, dgst digest.Digest) (bool, error) {
	f, err := os.Open(path)
	if err != nil {
		return false, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return false, err
	}
	w, err := content.OpenWriter(ctx, store, content.WithRef("sharedcontent-adopt-"+dgst.Encoded()),
		content.WithDescriptor(ocispec.Descriptor{Digest: dgst, Size: st.Size()}))
	if errdefs.IsAlreadyExists(err) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	defer w.Close()
	if err := content.Copy(ctx, w, f, st.Size(), dgst); err != nil && !errdefs.IsAlreadyExists(err) {
		return false, err
	}
	return true, nil
}
