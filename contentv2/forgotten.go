package contentv2

import (
	"context"

	"github.com/containerd/errdefs"
	"github.com/containerd/log"
	"github.com/opencontainers/go-digest"
)

// A node that comes back after being forgotten (docs/design.md §8.4):
// its journal says it was a member of the cluster, but the coordinator
// answers that it has no member record of it, so it dropped the node's
// references, and other nodes' GCs may have deleted blobs this node uses.
// The node says so loudly, keeps in its journal (and so re-registers at
// the sync that follows) only the blobs that still exist in the shared
// root, and reports the ones that are gone.

// cameBackForgotten handles a session answer that says the coordinator of
// cluster had forgotten this node.
func (s *store) cameBackForgotten(ctx context.Context, cluster string) {
	s.metrics.forgotten.Inc()
	l := log.G(ctx).WithField("node", s.nodeID).WithField("cluster", cluster)
	l.Error("THIS NODE WAS FORGOTTEN by the coordinator (node forget, or node expiry) while its journal says it is a member: its references were dropped and blobs it uses may have been deleted; re-registering the ones that still exist")
	gone := s.dropMissing(ctx)
	if len(gone) == 0 {
		l.Error("every blob of this node's journal still exists; all re-registered")
		return
	}
	s.metrics.forgottenGone.Add(float64(len(gone)))
	l.WithField("count", len(gone)).WithField("digests", gone).
		Error("blobs this node used are gone from the shared root (deleted while it was forgotten); dropped from its journal: images using them must be pulled again")
}

// dropMissing removes from the journal (and from what the coordinator is
// thought to have) every blob that does not exist in the shared root, and
// returns them.
func (s *store) dropMissing(ctx context.Context) []digest.Digest {
	if err := s.rootw.check(ctx); err != nil {
		// A root not verified is no evidence of what is missing.
		log.G(ctx).WithError(err).Warn("keeping every blob of the journal: the shared root is not verified")
		return nil
	}
	refs, _ := s.journal.snapshot()
	var gone []digest.Digest
	for _, d := range refs {
		if _, err := s.local.Info(ctx, d); !errdefs.IsNotFound(err) {
			continue
		}
		if err := s.journal.remove(d); err != nil {
			log.G(ctx).WithError(err).WithField("digest", d).Warn("dropping a missing blob from the journal")
			continue
		}
		s.mu.Lock()
		delete(s.referenced, d)
		s.mu.Unlock()
		gone = append(gone, d)
	}
	return gone
}
