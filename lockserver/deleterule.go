package lockserver

import (
	"context"
	"fmt"
	"time"

	"github.com/sharedcontent/sharedcontent/lockserver/api"
)

// The delete rule is the one rule that crosses the coordinator's parts:
// the references (refs part) and the members' state (members part,
// memberpart.go), read in one step under the members' mutex. The members
// part answers it through unsyncedLocked, writingRefs and syncedError.

// checkDeleteRule is the whole delete rule (docs/design.md §8.7): no reference to
// the resource (but own's, a dangling reap's own, which it drops) and
// every member synced, read in one step under mmu. A sync's write does
// not hold mmu (syncwrite.go), but makes its node synced only under mmu
// once it is durable, and a synced node's additions during its sync's
// write count here (writingRefs): so a delete that read no reference,
// then found the syncing member synced, cannot be granted while that
// member's sync references the resource (TestDeleteRuleAtomicWithSync,
// docs/design.md §10.5). Callers hold the resource's shard mutex (lock
// order: shard, mmu, refcount stripes).
func (l *Coordinator) checkDeleteRule(ctx context.Context, resourceID string, reap api.ReapMode, own string, now time.Time) error {
	l.mmu.Lock()
	defer l.mmu.Unlock()
	rc, err := l.refsWithPending(ctx, resourceID)
	if err != nil {
		return fmt.Errorf("delete:%s: %w", resourceID, err)
	}
	rc = l.writingRefs(resourceID, rc)
	if own != "" && rc.Has(own) {
		rc = rc.Clone()
		rc.Remove(own)
	}
	if rc.Len() > 0 {
		if reap == api.ReapDangling {
			return fmt.Errorf("delete:%s: a dangling reap drops only the reaper's own reference; another node's goes only with that node (its own delete, expiry, node forget): %w",
				resourceID, inUse(resourceID, rc))
		}
		return inUse(resourceID, rc)
	}
	return l.syncedError(resourceID, l.unsyncedLocked(now))
}
