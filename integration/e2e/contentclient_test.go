package e2e

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"time"

	"github.com/containerd/containerd/v2/core/content"
	"github.com/containerd/containerd/v2/core/content/proxy"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sharedcontent/sharedcontent/plugin"
)

// The read-back checks (every blob a node's containerd lists must read
// back with its digest) ask the node's containerd itself, over its gRPC
// socket, through the content service that `ctr content ls` and `ctr
// content get` use, in the namespace ctr uses: the same calls, through
// the same daemons and the plugin, without starting a ctr process per
// blob (hundreds of them per test, each a process start on a loaded
// machine).

// ctrNamespace is the containerd namespace ctr uses when
// CONTAINERD_NAMESPACE is not set (hermeticEnv drops it); CRI's is
// criNamespace (ctr -n k8s.io).
const ctrNamespace = "default"

// readTimeout bounds one listing or one blob's read, as ctr's --timeout
// did.
const readTimeout = 60 * time.Second

// readChunk is the size of each ReadAt of a read-back: one gRPC stream
// through containerd's content proxy to the plugin per call. ctr content
// get copies 32 KiB at a time (io.Copy), 32 times the calls: a 50 MB
// image read back through a race-built plugin took 14 s of a test's
// time that way. Each byte is still read through both daemons.
const readChunk = 1 << 20

// withContent runs fn with a content store client of n's containerd. A
// connection per call: a containerd restarted since (the fault tests
// restart them often) is reached at once, with no reconnect back-off.
func (n *node) withContent(ns, what string, fn func(ctx context.Context, cs content.Store) error) error {
	ctx, cancel := context.WithTimeout(namespaces.WithNamespace(context.Background(), ns), readTimeout)
	defer cancel()
	start := time.Now()
	conn, err := grpc.NewClient("unix://"+n.sock, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(plugin.MaxMsgSize), grpc.MaxCallSendMsgSize(plugin.MaxMsgSize)))
	if err == nil {
		err = fn(ctx, proxy.NewContentStore(conn))
		conn.Close()
	}
	n.trail("=== %s content service: -n %s %s (%.2fs): %v\n", start.Format("15:04:05.000"), ns, what, time.Since(start).Seconds(), err)
	if err != nil {
		return fmt.Errorf("%s: containerd's content service: %s: %w", n.id, what, err)
	}
	return nil
}

// contentDigest reads dgst through n's containerd, in ctr's namespace,
// and returns the digest of what it read and how many bytes it read.
func (n *node) contentDigest(dgst string) (string, int64, error) {
	return n.contentDigestIn(ctrNamespace, dgst)
}

// contentDigestIn is contentDigest in the namespace ns.
func (n *node) contentDigestIn(ns, dgst string) (string, int64, error) {
	h := sha256.New()
	var read int64
	err := n.withContent(ns, "get "+dgst, func(ctx context.Context, cs content.Store) error {
		// ctr content get's calls: a reader by digest alone, then
		// ReadAt calls in order; readChunk bytes each, not ctr's 32 KiB.
		ra, err := cs.ReaderAt(ctx, ocispec.Descriptor{Digest: digest.Digest(dgst)})
		if err != nil {
			return err
		}
		defer ra.Close()
		read, err = io.CopyBuffer(h, content.NewReader(ra), make([]byte, readChunk))
		return err
	})
	if err != nil {
		return "", read, err
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil)), read, nil
}

// contentList lists the digests of the blobs n's containerd has in ctr's
// namespace.
func (n *node) contentList() ([]string, error) { return n.contentListIn(ctrNamespace) }

// contentListIn is contentList in the namespace ns.
func (n *node) contentListIn(ns string) ([]string, error) {
	var out []string
	err := n.withContent(ns, "list", func(ctx context.Context, cs content.Store) error {
		return cs.Walk(ctx, func(info content.Info) error {
			out = append(out, info.Digest.String())
			return nil
		})
	})
	return out, err
}
