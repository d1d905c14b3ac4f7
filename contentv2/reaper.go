package contentv2

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/containerd/log"
)

// The reaper (docs/design.md §8.12). containerd offers a blob for deletion only when its
// own metadata changed, so a blob kept for another node may never be
// offered again once that node lets go of it, and a forgotten node's blobs
// are nobody's. One node at a time, holding the reap lock, walks the
// shared directory, decides (PlanReap, reapplan.go) and reclaims, under
// the delete rule:
//   - blobs nobody references, older than the grace (ReapOrphan);
//   - references to blobs that do not exist, seen so for the grace
//     (ReapDangling);
//   - ingests and node markers of nodes that are no longer members, and
//     leftovers in .trash, older than the grace: unlinked after a
//     successful delete of them, restored otherwise (§8.11);
//   - members gone by both measures: the coordinator has not heard from
//     them, and their marker has not changed, for the node expiry (the
//     coordinator checks its own measure again before it forgets).
//
// A blob being pulled is safe: its pull lock excludes the delete lock. A
// blob used by a node cut off from the coordinator is safe: that node is
// unsynced, and the delete rule refuses every delete until it syncs; and
// while it runs its marker changes, so it is never expired. The
// coordinator checks too: it grants a reap delete only to the node that
// holds the reap lock (ReapLockResource), and only outside its own reap
// grace of the resource's last pull or reference change.

// ReapLockResource is the reap lock: the resource whose update lock the
// reaper holds for its whole pass. The coordinator grants a reap delete
// (ReapOrphan, ReapDangling) and a member's expiry only to the node
// holding it with a live lease. Its value is the coordinator's name for
// it on the wire.
const ReapLockResource = "sharedcontent/reap"

// ReapReport is what one reaper pass did.
type ReapReport struct {
	// Ran is false when another node's reaper held the lock.
	Ran bool
	// Plan is what the pass decided; Done the part of it that was
	// removed (the coordinator may refuse the rest).
	Plan, Done ReapPlan
	// Orphans and OrphanBytes count the unreferenced blobs removed;
	// ReclaimableBytes counts every unreferenced blob found, also those
	// still within the grace or kept by the delete rule.
	Orphans, OrphanBytes, ReclaimableBytes int64
	// Dangling counts references to missing blobs dropped.
	Dangling int
	// Ingests, Markers and Trash count leftovers removed; TrashRestored
	// the trash entries put back in place, for want of a successful
	// completion of their delete (docs/design.md §8.11).
	Ingests, Markers, Trash, TrashRestored int
	// Expired counts members forgotten.
	Expired int
}

// reaperState is what the reaper keeps between passes.
type reaperState struct {
	pass sync.Mutex // one pass at a time on this node
	mem  ReapMemory
}

func (s *store) reapLoop() {
	defer s.wg.Done()
	t := time.NewTicker(s.reapInterval)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), s.reapInterval)
		rep, err := s.Reap(ctx)
		cancel()
		l := log.L.WithField("node", s.nodeID)
		if errors.Is(err, ErrRootUnverified) {
			l.WithError(err).Debug("reaper pass skipped") // the root watch has said so once
		} else if err != nil {
			l.WithError(err).Warn("reaper pass failed")
		} else if rep.Ran {
			l.WithField("orphans", rep.Orphans).WithField("bytes", rep.OrphanBytes).WithField("dangling", rep.Dangling).
				WithField("ingests", rep.Ingests).WithField("expired", rep.Expired).
				WithField("reclaimable_bytes", rep.ReclaimableBytes).Debug("reaper pass")
		}
	}
}

// Reap runs one reaper pass: it takes the reap lock, plans and acts. A
// pass runs only on a verified shared root, probed before it plans and
// again before it acts (docs/design.md §8.18): a view of a root that is
// not mounted, or another root, is no evidence about the cluster's blobs.
func (s *store) Reap(ctx context.Context) (ReapReport, error) {
	s.reaper.pass.Lock()
	defer s.reaper.pass.Unlock()
	var rep ReapReport
	if err := s.rootw.check(ctx); err != nil {
		return rep, fmt.Errorf("reaper paused: %w", err)
	}
	lk, err := s.coord.Lock(ctx, LockRequest{Type: OpUpdate, ResourceID: ReapLockResource})
	if errors.Is(err, ErrLocked) {
		return rep, nil
	}
	if err != nil {
		return rep, fmt.Errorf("reaper: %w", err)
	}
	defer func() {
		if err := lk.Unlock(context.WithoutCancel(ctx), true, nil); err != nil {
			log.G(ctx).WithError(err).Warn("reaper: releasing the reap lock")
		}
	}()
	rep.Ran = true
	plan, err := PlanReap(ctx, s.root, s.coord, ReapOptions{Grace: s.reapGrace, Self: s.nodeID}, &s.reaper.mem)
	if err != nil {
		return rep, err
	}
	rep.Plan, rep.ReclaimableBytes = plan, plan.ReclaimableBytes
	if err := s.rootw.check(ctx); err != nil {
		return rep, fmt.Errorf("reaper paused: %w", err)
	}
	rep.Done = ReapPlan{Grace: plan.Grace, NodeExpiry: plan.NodeExpiry}
	if err := s.reapOrphans(ctx, plan.Orphans, &rep); err != nil {
		return rep, err
	}
	s.reapDangling(ctx, plan.Dangling, &rep)
	s.reapLeftovers(ctx, plan, &rep)
	s.expireMembers(ctx, lk, plan.Expire, &rep)
	s.metrics.reapable.Set(float64(rep.ReclaimableBytes))
	return rep, nil
}

// reapOrphans deletes the planned orphans, each under the delete rule.
func (s *store) reapOrphans(ctx context.Context, orphans []ReapBlob, rep *ReapReport) error {
	for _, o := range orphans {
		lk, err := s.coord.Lock(ctx, LockRequest{Type: OpDelete, ResourceID: o.Digest.String(), Reap: ReapOrphan})
		if err != nil {
			if !isRefusal(err) {
				return fmt.Errorf("reaper: %w", err)
			}
			continue // referenced meanwhile, being pulled, or a member unsynced
		}
		if err := s.removeLocked(ctx, o.Digest, lk); err != nil {
			return fmt.Errorf("reaper: %w", err)
		}
		if _, err := os.Stat(s.blobPath(o.Digest)); errors.Is(err, fs.ErrNotExist) {
			rep.Orphans++
			rep.OrphanBytes += o.Size
			rep.Done.Orphans = append(rep.Done.Orphans, o)
			s.metrics.reaped.WithLabelValues("orphan").Inc()
		}
	}
	return nil
}

// reapDangling drops the planned dangling references, each under the
// delete rule, once the delete lock shows the blob still missing.
func (s *store) reapDangling(ctx context.Context, dangling []ReapRef, rep *ReapReport) {
	for _, r := range dangling {
		lk, err := s.coord.Lock(ctx, LockRequest{Type: OpDelete, ResourceID: r.Resource, Reap: ReapDangling})
		if err != nil {
			continue
		}
		// Under the delete lock no pull can commit it: look once more.
		_, err = os.Stat(s.blobPath(r.blobMissing))
		missing := errors.Is(err, fs.ErrNotExist)
		if uerr := lk.Unlock(context.WithoutCancel(ctx), missing, nil); uerr == nil && missing {
			rep.Dangling++
			rep.Done.Dangling = append(rep.Done.Dangling, r)
			s.metrics.reaped.WithLabelValues("dangling").Inc()
		}
	}
}

// reapLeftovers removes the planned ingests and markers, and settles the
// planned trash entries: each is unlinked or restored (settleTrash).
func (s *store) reapLeftovers(ctx context.Context, plan ReapPlan, rep *ReapReport) {
	for _, kind := range []struct {
		files []ReapFile
		done  *[]ReapFile
		n     *int
		label string
	}{{plan.Ingests, &rep.Done.Ingests, &rep.Ingests, "ingest"}, {plan.Markers, &rep.Done.Markers, &rep.Markers, "marker"}} {
		for _, f := range kind.files {
			if os.RemoveAll(filepath.Join(s.root, f.Path)) == nil {
				*kind.n++
				*kind.done = append(*kind.done, f)
				s.metrics.reaped.WithLabelValues(kind.label).Inc()
			}
		}
	}
	for _, f := range plan.Trash {
		removed, restored := s.settleTrash(ctx, f.Path)
		switch {
		case removed:
			rep.Trash++
			rep.Done.Trash = append(rep.Done.Trash, f)
			s.metrics.reaped.WithLabelValues("trash").Inc()
		case restored:
			rep.TrashRestored++
			s.metrics.reaped.WithLabelValues("trash_restored").Inc()
		}
	}
}

// expireMembers asks the coordinator to forget the planned members, and
// says so loudly.
func (s *store) expireMembers(ctx context.Context, lk Lock, members []ReapMember, rep *ReapReport) {
	for _, m := range members {
		l := log.G(ctx).WithField("node", m.Node).WithField("marker_unchanged", m.MarkerUnchanged).
			WithField("reaper", s.nodeID)
		absent, err := s.coord.ExpireMember(ctx, lk, m.Node, m.MarkerUnchanged)
		if err != nil {
			l.WithError(err).WithField("absent", m.Absent).Info("reaper: the coordinator kept a member the reaper found gone")
			continue
		}
		rep.Expired++
		rep.Done.Expire = append(rep.Done.Expire, ReapMember{Node: m.Node, Absent: absent, MarkerUnchanged: m.MarkerUnchanged})
		s.metrics.reaped.WithLabelValues("member").Inc()
		l.WithField("absent", absent).WithField("node_expiry", rep.Plan.NodeExpiry).
			Warn("reaper: MEMBER EXPIRED (unheard of by the coordinator and its marker unchanged for the node expiry); its references are dropped")
	}
}
