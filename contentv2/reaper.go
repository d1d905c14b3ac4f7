package contentv2

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/containerd/log"
	"github.com/opencontainers/go-digest"
	"github.com/sharedcontent/sharedcontent/lockserver/api"
)

// The reaper (docs/design.md §8.12). containerd offers a blob for deletion only when its
// own metadata changed, so a blob kept for another node may never be
// offered again once that node lets go of it, and a forgotten node's blobs
// are nobody's. One node's view of the shared root is evidence about that
// node only. So every node, at each pass, drops its own references to
// blobs its root has not held at two checks a grace apart (its journal
// against its root, dropOwnDangling); and one node at a time, a
// designated reaper holding the reap lock, walks the shared directory,
// decides (PlanReap, reapplan.go) and reclaims, under the delete rule:
//   - blobs nobody references, older than the grace (api.ReapOrphan);
//   - ingests and node markers of nodes that are no longer members, and
//     leftovers in .trash, older than the grace: unlinked after a
//     successful delete of them, restored otherwise (§8.11);
//   - members gone by both measures: the coordinator has not heard from
//     them, and their marker has not changed, for the node expiry (the
//     reaper reports the marker's state; the coordinator measures both).
//
// A reaper never drops another node's reference: references to missing
// blobs it sees are reported (the plan's Dangling), and each goes with
// its node (that node's own pass, its expiry, `node forget`).
// A blob being pulled is safe: its pull lock excludes the delete lock. A
// blob used by a node cut off from the coordinator is safe: that node is
// unsynced, and the delete rule refuses every delete until it syncs; and
// while it runs its marker changes, so it is never expired. The
// coordinator checks too: it grants the reap lock only to a designated
// reaper, and a reap delete only to the node holding it, outside its own
// reap grace of the resource's last pull or reference change.

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
	// Dangling counts this node's own references to missing blobs
	// dropped (by every node, also without the reap lock).
	Dangling int
	// Ingests, Markers and Trash count leftovers removed; TrashRestored
	// the trash entries put back in place, for want of a successful
	// completion of their delete (docs/design.md §8.11).
	Ingests, Markers, Trash, TrashRestored int
	// Expired counts members forgotten.
	Expired int
}

// Results of a reaper pass (the label of sharedcontent_reaper_passes_total).
const (
	reapRan     = "ran"
	reapSkipped = "skipped"
	reapPaused  = "paused"
	reapFailed  = "failed"
)

var reapResults = []string{reapRan, reapSkipped, reapPaused, reapFailed}

// reapResult is the result of a pass that returned rep and err.
func reapResult(rep ReapReport, err error) string {
	switch {
	case errors.Is(err, ErrRootUnverified), errors.Is(err, ErrRootStalled):
		return reapPaused
	case err != nil:
		return reapFailed
	case rep.Ran:
		return reapRan
	}
	return reapSkipped
}

// reaperState is what the reaper keeps between passes.
type reaperState struct {
	pass sync.Mutex // one pass at a time on this node
	mem  ReapMemory
	// missing: this node's referenced blobs its root did not hold, each
	// since it was first seen so (monotonic); protected by pass.
	missing map[digest.Digest]time.Time
	// forbidden: the coordinator refused this node the reap lock (not a
	// designated reaper), logged once; protected by pass.
	forbidden bool
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

// Reap runs one reaper pass: it drops this node's own dangling
// references, then takes the reap lock, plans and acts. A pass runs only
// on a verified shared root, probed before it plans and again before it
// acts (docs/design.md §8.19), and never while a call on the root is
// overdue (§8.20): a view of a root that is not mounted, another root or
// a stalled one is no evidence about the cluster's blobs.
func (s *store) Reap(ctx context.Context) (rep ReapReport, err error) {
	s.reaper.pass.Lock()
	defer s.reaper.pass.Unlock()
	defer func() { s.metrics.reapPasses.WithLabelValues(reapResult(rep, err)).Inc() }()
	if err := s.guard.refuse("reaper"); err != nil {
		return rep, err
	}
	if err := s.rootw.check(ctx); err != nil {
		return rep, fmt.Errorf("reaper paused: %w", err)
	}
	s.dropOwnDangling(ctx, &rep)
	lk, err := s.coord.Lock(ctx, api.LockRequest{Type: api.OperationUpdate, ResourceID: api.ReapLockResource, Wait: new(false)})
	switch {
	case errors.Is(err, api.ErrLocked):
		return rep, nil
	case errors.Is(err, api.ErrForbidden):
		// Not a designated reaper (--reapers on the coordinator).
		if !s.reaper.forbidden {
			s.reaper.forbidden = true
			log.G(ctx).WithError(err).WithField("node", s.nodeID).Info("reaper: this node is not a designated reaper; it drops only its own dangling references")
		}
		return rep, nil
	case err != nil:
		return rep, fmt.Errorf("reaper: %w", err)
	}
	s.reaper.forbidden = false
	defer func() {
		if err := lk.Unlock(context.WithoutCancel(ctx), true, nil); err != nil {
			log.G(ctx).WithError(err).Warn("reaper: releasing the reap lock")
		}
	}()
	rep.Ran = true
	plan, stalls, err := s.planReap(ctx)
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
	s.reapLeftovers(ctx, plan, &rep)
	if err := s.noStallSince(stalls, "reaper: member expiry"); err != nil {
		return rep, err
	}
	s.expireMembers(ctx, lk, plan, &rep)
	s.metrics.reapable.Set(float64(rep.ReclaimableBytes))
	return rep, nil
}

// reapOrphans deletes the planned orphans, each under the delete rule.
func (s *store) reapOrphans(ctx context.Context, orphans []ReapBlob, rep *ReapReport) error {
	for _, o := range orphans {
		lk, err := s.coord.Lock(ctx, api.LockRequest{Type: api.OperationDelete, ResourceID: o.Digest.String(), Reap: api.ReapOrphan, Wait: new(false)})
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

// dropOwnDangling drops this node's own references to blobs its root has
// not held at two checks (passes) a grace apart (docs/design.md §8.12):
// its journal against its own view. It drops none while more than a
// tenth of them (and more than one) are missing at once: a view that
// empty is the root's fault (not mounted, another filesystem) far more
// likely than the blobs', and it warns instead. Callers hold
// s.reaper.pass.
func (s *store) dropOwnDangling(ctx context.Context, rep *ReapReport) {
	l := log.G(ctx).WithField("node", s.nodeID)
	refs, err := s.journal.snapshot()
	if err != nil {
		l.WithError(err).Warn("reaper: reading the node journal")
		return
	}
	// A stall (design §8.20) makes a view no evidence: the memory of
	// what was missing restarts, and nothing seen across one counts.
	stalls, _ := s.guard.stallsSince()
	now := time.Now()
	missing := map[digest.Digest]time.Time{}
	var due []digest.Digest
	for _, d := range refs {
		if !s.blobMissing(ctx, d) {
			continue
		}
		first, seen := s.reaper.missing[d]
		if !seen {
			first = now
		}
		missing[d] = first
		if seen && now.Sub(first) >= s.reapGrace {
			due = append(due, d)
		}
	}
	if err := s.noStallSince(stalls, "reaper: own dangling references"); err != nil {
		l.WithError(err).Warn("reaper: the shared root stalled while this node looked for its blobs; no reference dropped")
		s.reaper.missing = nil
		return
	}
	s.reaper.missing = missing
	s.metrics.missingBlobs.Set(float64(len(missing)))
	if len(missing) > 1 && len(missing)*10 > len(refs) {
		l.WithField("missing", len(missing)).WithField("referenced", len(refs)).WithField("root", s.root).
			Warn("reaper: more than a tenth of this node's blobs are missing from its view of the shared root; is the root mounted? No reference dropped")
		return
	}
	if len(due) > 0 {
		// Absence is evidence only from a root that still checks out.
		if err := s.rootw.check(ctx); err != nil {
			l.WithError(err).Warn("reaper: the shared root no longer checks out; no reference dropped")
			s.reaper.missing = nil
			return
		}
	}
	for _, d := range due {
		if s.dropDangling(ctx, d) {
			rep.Dangling++
			rep.Done.Dangling = append(rep.Done.Dangling, ReapRef{Resource: d.String(), Nodes: []string{s.nodeID}, MissingFor: now.Sub(missing[d]), blobMissing: d})
			s.metrics.reaped.WithLabelValues("dangling").Inc()
			delete(s.reaper.missing, d)
		}
	}
}

// dropDangling drops this node's reference to dgst, missing from its
// root: a delete of its own (no reap mode), which drops that reference
// at the coordinator whether granted or refused, and removes nothing.
// Under the delete lock, or after a refusal, the blob is looked for once
// more; one found after all is referenced again. It reports whether the
// reference went.
func (s *store) dropDangling(ctx context.Context, dgst digest.Digest) bool {
	l := log.G(ctx).WithField("digest", dgst).WithField("node", s.nodeID)
	lk, err := s.askDelete(ctx, dgst)
	if err != nil && !isRefusal(err) {
		// Unknown whether it arrived: the journal keeps the reference,
		// and the next sync sends it again.
		l.WithError(err).Debug("reaper: dropping a dangling reference of this node")
		return false
	}
	if errors.Is(err, api.ErrLocked) {
		// A pull (perhaps this node's commit) or a delete is in flight:
		// not now. The refused delete dropped the reference: add it back.
		if rerr := s.reference(ctx, dgst, false); rerr != nil {
			l.WithError(rerr).Debug("reaper: referencing again a blob being pulled")
		}
		return false
	}
	missing := s.blobMissing(ctx, dgst)
	if err == nil {
		if uerr := lk.Unlock(context.WithoutCancel(ctx), missing, nil); uerr != nil {
			l.WithError(uerr).Debug("reaper: releasing the delete lock of a dangling reference")
		}
	}
	if !missing {
		if rerr := s.reference(ctx, dgst, true); rerr != nil {
			l.WithError(rerr).Warn("reaper: a blob seen missing is back; referencing it again failed (the next sync sends the journal's reference)")
		}
		return false
	}
	if jerr := s.journal.remove(dgst); jerr != nil {
		l.WithError(jerr).Warn("node journal")
	}
	l.Info("reaper: dropped this node's reference to a blob missing from its root for the grace")
	return true
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

// expireMembers reports the marker of every member that is not live to
// the coordinator, asking it to forget the member: the coordinator
// measures how long this reaper has reported the same state, and forgets
// only a member gone by both of its measures. The members the plan found
// gone are logged loudly; a member whose marker the reaper does not see
// is not reported (that proves nothing).
func (s *store) expireMembers(ctx context.Context, lk Lock, plan ReapPlan, rep *ReapReport) {
	planned := len(plan.Expire)
	for i, m := range append(slices.Clone(plan.Expire), plan.Absent...) {
		if m.marker == "" {
			continue
		}
		l := log.G(ctx).WithField("node", m.Node).WithField("marker_unchanged", m.MarkerUnchanged).
			WithField("reaper", s.nodeID)
		absent, err := s.coord.ExpireMember(ctx, lk, m.Node, MarkerReport{State: m.marker, Unchanged: m.MarkerUnchanged})
		if err != nil {
			if i < planned {
				l.WithError(err).WithField("absent", m.Absent).Info("reaper: the coordinator kept a member the reaper found gone")
			}
			continue
		}
		rep.Expired++
		rep.Done.Expire = append(rep.Done.Expire, ReapMember{Node: m.Node, Absent: absent, MarkerUnchanged: m.MarkerUnchanged})
		s.metrics.reaped.WithLabelValues("member").Inc()
		l.WithField("absent", absent).WithField("node_expiry", rep.Plan.NodeExpiry).
			Warn("reaper: MEMBER EXPIRED (unheard of by the coordinator and its marker unchanged for the node expiry); its references are dropped")
	}
}

// blobMissing reports whether this node's root surely lacks dgst: a
// stat that says so within the storage deadline. A root that does not
// answer is no proof of absence.
func (s *store) blobMissing(ctx context.Context, dgst digest.Digest) bool {
	err := s.guard.do(ctx, "reaper_stat", func() error { _, err := os.Stat(s.blobPath(dgst)); return err })
	return errors.Is(err, fs.ErrNotExist)
}
