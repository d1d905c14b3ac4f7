package plugin

import (
	"context"
	"time"

	diffapi "github.com/containerd/containerd/api/services/diff/v1"
	"github.com/containerd/containerd/v2/contrib/diffservice"
	"github.com/containerd/containerd/v2/core/content"
	"github.com/containerd/containerd/v2/core/diff"
	"github.com/containerd/containerd/v2/core/diff/apply"
	"github.com/containerd/containerd/v2/core/mount"
	"github.com/containerd/log"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// AppliedMessage is the debug line the daemon logs for every layer it
// applies (fields digest, size, duration): the way to see that containerd
// unpacks through this daemon (the e2e tests count it).
const AppliedMessage = "diff: layer applied from the shared directory"

// newDiffService is containerd's Diff API over cs, served next to the
// content API so that containerd can unpack without reading layers through
// its content proxy (one gRPC stream per 32 KiB ReadAt; docs/design.md §5.5): Apply is
// containerd's own file-system applier reading the layer straight from cs.
//
// Compare (Diff) answers NotImplemented, so containerd's diff service falls
// through to the next differ in its list, its own "walking" differ. A
// comparer here would write the new layer into cs behind containerd's
// metadata store: the blob would be missing from the namespace and the
// lease that the caller holds (`ctr snapshots diff` fails with "content
// digest ...: not found"; see integration/e2e/differ_test.go).
//
// Apply mounts what containerd sends (a bind mount for a first layer), so
// the daemon must run as root on containerd's host, as containerd's own
// differ does.
func newDiffService(cs content.Provider) diffapi.DiffServer {
	return diffservice.FromApplierAndComparer(loggedApplier{apply.NewFileSystemApplier(cs)}, nil)
}

// loggedApplier logs AppliedMessage after each successful Apply.
type loggedApplier struct{ diff.Applier }

func (a loggedApplier) Apply(ctx context.Context, desc ocispec.Descriptor, mounts []mount.Mount, opts ...diff.ApplyOpt) (ocispec.Descriptor, error) {
	start := time.Now()
	d, err := a.Applier.Apply(ctx, desc, mounts, opts...)
	if err == nil {
		log.G(ctx).WithField("digest", desc.Digest).WithField("size", desc.Size).
			WithField("duration", time.Since(start)).Debug(AppliedMessage)
	}
	return d, err
}
