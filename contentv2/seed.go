package contentv2

import (
	"context"
	"fmt"
	"slices"

	"github.com/containerd/log"
	"github.com/opencontainers/go-digest"
)

// Seeding a new journal (docs/design.md §8.6). A journal of a
// new generation (a wiped or replaced state dir, or one older than
// generations) may lack blobs this node's containerd still uses: the
// coordinator only adds references from its first sync, but every later
// sync replaces them. So before its first sync the node takes into the
// journal every reference the coordinator has of it; the node's own GCs
// drop later what it no longer uses.

// seedJournal does that once per journal generation.
func (s *store) seedJournal(ctx context.Context) error {
	if s.journal.isSeeded() {
		return nil
	}
	var mine []digest.Digest
	err := s.coord.Refs(ctx, func(resource string, nodes []string) error {
		if !slices.Contains(nodes, s.nodeID) {
			return nil
		}
		if d, err := digest.Parse(resource); err == nil {
			mine = append(mine, d)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("seeding the new journal with this node's references: %w", err)
	}
	if err := s.journal.seed(mine); err != nil {
		return err
	}
	log.G(ctx).WithField("node", s.nodeID).WithField("generation", s.journal.generation).WithField("refs", len(mine)).
		Info("new node journal: took in the references the coordinator had of this node")
	return nil
}
