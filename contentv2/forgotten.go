package contentv2

import (
	"context"
	"fmt"

	"github.com/containerd/errdefs"
	"github.com/containerd/log"
	"github.com/opencontainers/go-digest"
)

// A node that comes back after being forgotten (docs/design.md §8.13):
// its journal says it was a member of the cluster, but the coordinator
// answers that it has no member record of it, so it dropped the node's
// references, and other nodes' GCs may have deleted blobs this node uses.
// The node says so loudly, keeps in its journal (and so re-registers at
// the sync that follows) only the blobs that still exist in the shared
// root, and reports the ones that are gone.
//
// Which blobs are gone is known only from a verified root: while the root
// does not answer (its probe times out), the cleanup waits, recorded in
// the journal so that a restart does not lose it, and so does the sync
// (it would re-register deleted blobs as if this node had them). Every
// session round tries it again until the root answers.

// cameBackForgotten records a session answer that says the coordinator of
// cluster had forgotten this node; settleForgotten does the cleanup.
func (s *store) cameBackForgotten(ctx context.Context, cluster string) error {
	s.metrics.forgotten.Inc()
	log.G(ctx).WithField("node", s.nodeID).WithField("cluster", cluster).
		Error("THIS NODE WAS FORGOTTEN by the coordinator (node forget, or node expiry) while its journal says it is a member: its references were dropped and blobs it uses may have been deleted; re-registering the ones that still exist")
	return s.journal.setForgotten(cluster)
}

// settleForgotten drops from the journal the blobs gone from the shared
// root since this node was forgotten, if it was, and reports them. It
// fails, and the cleanup stays pending for the next session round, while
// the root is not verified; the caller must not sync meanwhile.
func (s *store) settleForgotten(ctx context.Context) error {
	cluster := s.journal.forgottenBy()
	if cluster == "" {
		return nil
	}
	l := log.G(ctx).WithField("node", s.nodeID).WithField("cluster", cluster)
	gone, err := s.dropMissing(ctx)
	if err != nil {
		return fmt.Errorf("node %s came back forgotten by cluster %s; which of its blobs are gone is known only once the shared root answers, and its journal is not synced until then: %w", s.nodeID, cluster, err)
	}
	if err := s.journal.setForgotten(""); err != nil {
		return err
	}
	if len(gone) == 0 {
		l.Error("every blob of this node's journal still exists; all re-registered")
		return nil
	}
	s.metrics.forgottenGone.Add(float64(len(gone)))
	l.WithField("count", len(gone)).WithField("digests", gone).
		Error("blobs this node used are gone from the shared root (deleted while it was forgotten); dropped from its journal: images using them must be pulled again")
	return nil
}

// dropMissing removes from the journal (and from what the coordinator is
// thought to have) every blob that does not exist in the shared root, and
// returns them. A root not verified is no evidence of what is missing:
// then it removes nothing and returns why.
func (s *store) dropMissing(ctx context.Context) ([]digest.Digest, error) {
	if err := s.rootw.check(ctx); err != nil {
		return nil, err
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
	return gone, nil
}
