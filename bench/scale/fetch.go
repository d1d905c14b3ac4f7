package scale

import (
	"bytes"
	"context"
	"fmt"
	"time"

	"github.com/containerd/containerd/v2/core/content"
	"github.com/containerd/errdefs"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// fetch is what containerd does with one layer of an image it pulls, on a
// node whose content store is contentv2 (ContainerdMode), with the
// download faked: remotes.Fetch's open, status and commit
// (core/remotes/handlers.go, fetch), through content.OpenWriter (which
// retries a writer answered ErrUnavailable, backing off from 16 ms to
// 2 s), each open first asking Info as the metadata store does for
// shared content (core/metadata/content.go, Writer; content_sharing_policy
// "shared"). The download is a pause of cfg.Download, then data written
// and committed. It reports whether this node downloaded the blob.
func (n *node) fetch(ctx context.Context, cfg Config, desc ocispec.Descriptor, data []byte) (downloaded bool, err error) {
	ref := "layer-" + desc.Digest.String()
	w, err := content.OpenWriter(ctx, sharedIngester{n}, content.WithRef(ref), content.WithDescriptor(desc))
	if errdefs.IsAlreadyExists(err) {
		return false, nil // here already: referenced by Info
	}
	if err != nil {
		return false, fmt.Errorf("open writer: %w", err)
	}
	defer w.Close()
	st, err := w.Status() // a follower waits here for its holder
	if err != nil {
		return false, fmt.Errorf("status: %w", err)
	}
	if st.Offset == desc.Size {
		return false, commit(ctx, w, desc)
	}
	time.Sleep(cfg.Download)
	if _, err := w.Write(data); err != nil {
		return true, fmt.Errorf("write: %w", err)
	}
	return true, commit(ctx, w, desc)
}

func commit(ctx context.Context, w content.Writer, desc ocispec.Descriptor) error {
	if err := w.Commit(ctx, desc.Size, desc.Digest); err != nil && !errdefs.IsAlreadyExists(err) {
		return fmt.Errorf("commit %s: %w", desc.Digest, err)
	}
	return nil
}

// sharedIngester is the node's store as containerd's metadata store
// calls it to open a writer: Info first (a blob another node has put in
// the shared root is used, and referenced, without a download), then the
// store's Writer.
type sharedIngester struct{ n *node }

func (i sharedIngester) Writer(ctx context.Context, opts ...content.WriterOpt) (content.Writer, error) {
	var wo content.WriterOpts
	for _, o := range opts {
		if err := o(&wo); err != nil {
			return nil, err
		}
	}
	if info, err := i.n.store.Info(ctx, wo.Desc.Digest); err == nil && info.Size == wo.Desc.Size {
		return nil, fmt.Errorf("content %s: %w", wo.Desc.Digest, errdefs.ErrAlreadyExists)
	}
	w, err := i.n.store.Writer(ctx, opts...)
	if errdefs.IsUnavailable(err) {
		i.n.writerRetries.Add(1)
	}
	return w, err
}

// blobData is the content of blob j of an image salted salt: size bytes.
func blobData(salt string, j, size int) []byte {
	seed := []byte(fmt.Sprintf("scale-blob-%s-%d;", salt, j))
	return bytes.Repeat(seed, size/len(seed)+1)[:size]
}
