package hostinstall

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

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
	store, closeConn, err := contentClient(hostRoot, socket)
	if err != nil {
		return 0, err
	}
	defer closeConn()
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
// reports whether it wrote it. As containerd does, it asks Info first:
// the daemon then references a blob another node stored for this node
// too, and answers a Writer for a blob another node is storing or has
// just stored "unavailable, retry" (contentv2's downloadedElsewhere).
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
	desc := ocispec.Descriptor{Digest: dgst, Size: st.Size()}
	for wait := 50 * time.Millisecond; ; wait = min(2*wait, 2*time.Second) {
		if _, err := store.Info(ctx, dgst); err == nil {
			return false, nil
		} else if !errdefs.IsNotFound(err) {
			return false, err
		}
		w, err := store.Writer(ctx, content.WithRef("sharedcontent-adopt-"+dgst.Encoded()), content.WithDescriptor(desc))
		switch {
		case errdefs.IsAlreadyExists(err):
			return false, nil
		case errdefs.IsUnavailable(err):
			select {
			case <-ctx.Done():
				return false, fmt.Errorf("%w (last: %v)", ctx.Err(), err)
			case <-time.After(wait):
			}
			continue
		case err != nil:
			return false, err
		}
		defer w.Close()
		if err := content.Copy(ctx, w, f, st.Size(), dgst); err != nil && !errdefs.IsAlreadyExists(err) {
			return false, err
		}
		return true, nil
	}
}

// DefaultContainerdSocket is containerd's API socket on the host.
const DefaultContainerdSocket = "/run/containerd/containerd.sock"

// restoreLocalContent is adoptLocalContent's way back, before containerd
// is switched back to its own store (helm uninstall): every blob
// containerd records in CRI's namespace that its own store lacks is read
// through containerd (which reads the shared store) and written into its
// own store, so that the images it pulled on the shared store (the
// sandbox image, every pod's) still read back and start pods afterwards.
func restoreLocalContent(ctx context.Context, hostRoot, containerdRoot, containerdSocket string) (restored int, err error) {
	if _, err := os.Stat(filepath.Join(hostRoot, containerdSocket)); errors.Is(err, os.ErrNotExist) {
		log.G(ctx).WithField("socket", containerdSocket).Warn("containerd is not running: its own content store cannot be restored from the shared store")
		return 0, nil
	}
	store, closeConn, err := contentClient(hostRoot, containerdSocket)
	if err != nil {
		return 0, err
	}
	defer closeConn()
	ctx = namespaces.WithNamespace(ctx, "k8s.io")
	dir := filepath.Join(hostRoot, containerdRoot, localBlobs)
	var infos []content.Info
	if err := store.Walk(ctx, func(i content.Info) error { infos = append(infos, i); return nil }); err != nil {
		return 0, fmt.Errorf("listing containerd's content: %w", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return 0, err
	}
	for _, i := range infos {
		path := filepath.Join(dir, i.Digest.Encoded())
		if i.Digest.Algorithm() != digest.SHA256 {
			continue
		}
		if _, err := os.Stat(path); err == nil {
			continue
		}
		if err := restoreBlob(ctx, store, dir, ocispec.Descriptor{Digest: i.Digest, Size: i.Size}); err != nil {
			// What containerd cannot read now it could not read after the
			// switch either; say so and go on.
			log.G(ctx).WithError(err).WithField("digest", i.Digest).Warn("cannot restore a blob into containerd's own store")
			continue
		}
		restored++
	}
	log.G(ctx).WithField("blobs", restored).Info("containerd's own content store restored from the shared store")
	return restored, nil
}

// restoreBlob copies desc from store into dir (a temporary file, checked
// against the digest, then renamed), as containerd's own store keeps it.
func restoreBlob(ctx context.Context, store content.Store, dir string, desc ocispec.Descriptor) error {
	ra, err := store.ReaderAt(ctx, desc)
	if err != nil {
		return err
	}
	defer ra.Close()
	tmp, err := os.CreateTemp(dir, ".restore-"+desc.Digest.Encoded()+"-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	d := desc.Digest.Algorithm().Digester()
	_, err = io.Copy(io.MultiWriter(tmp, d.Hash()), content.NewReader(ra))
	if err := errors.Join(err, tmp.Chmod(0o444), tmp.Close()); err != nil {
		return err
	}
	if d.Digest() != desc.Digest {
		return fmt.Errorf("blob %s read back as %s: %w", desc.Digest, d.Digest(), errdefs.ErrDataLoss)
	}
	return os.Rename(tmp.Name(), filepath.Join(dir, desc.Digest.Encoded()))
}

// contentClient is the content API served on the unix socket at the
// host path socket (the daemon's, or containerd's own).
func contentClient(hostRoot, socket string) (content.Store, func() error, error) {
	conn, err := grpc.NewClient("unix://"+filepath.Join(hostRoot, socket),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(plugin.MaxMsgSize), grpc.MaxCallSendMsgSize(plugin.MaxMsgSize)))
	if err != nil {
		return nil, nil, err
	}
	return proxy.NewContentStore(conn), conn.Close, nil
}
