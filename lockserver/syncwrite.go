package lockserver

import (
	"context"
	"fmt"
	"maps"
	"slices"

	"github.com/containerd/log"

	"github.com/sharedcontent/sharedcontent/internal/failpoint"
	"github.com/sharedcontent/sharedcontent/lockserver/api"
	"github.com/sharedcontent/sharedcontent/refcount"
)

// A done sync's write (docs/design.md §10.5). The write of a big sync
// takes seconds, and every session call needs mmu, so it is made without
// mmu, by the request's own goroutine:
//   - freezeSync (under mmu) folds into the chunks the changes the node
//     made since the sync started, and marks the sync written; the
//     member keeps its synced state (a sync never makes its node
//     unsynced); a retry of its done waits for the write, a step of
//     another sync of the node is refused as busy;
//   - writeSync writes the references (applySync), without mmu;
//   - meanwhile the node's own changes go on being noted in the sync
//     (since): a reference it adds counts for the delete rule at once
//     (writingRefs), and they are all written again after the replace,
//     which may have landed after them (reapplyLate), until none came
//     while they were written;
//   - finishSync (under mmu) makes the node synced, if the sync is still
//     its current one (its session did not lapse or end meanwhile).

// syncWrite is a done sync's write.
type syncWrite struct {
	m          *member
	s          *nodeSync
	generation string          // the journal generation the node syncs from
	before     refcount.Member // m's record at the freeze
	refs       map[string]struct{}
	// equal: a full sync of exactly the node's stored references, which
	// applySync left as they were (sameAsStored).
	equal bool
	// release gives back the request's sync slot (idempotent).
	release func()
}

// freezeSync makes m's sync, at its done, the write to make: the changes
// the node made since the sync started are folded into the chunks, and
// from now on since collects those it makes while the write runs. The
// member's references count as being written (forgetLocked waits).
// Callers hold mmu.
func (sy *syncs) freezeSync(m *member, generation string) *syncWrite {
	s := m.sync
	before := len(s.refs)
	for id, added := range s.since {
		if !s.buckets.Holds(id) {
			continue // outside the replaced buckets, the change is stored already
		}
		if added {
			s.refs[id] = struct{}{}
		} else {
			delete(s.refs, id)
		}
	}
	sy.syncLimits.buffered += len(s.refs) - before
	s.since = map[string]bool{}
	s.writing, s.ended = true, make(chan struct{})
	m.writing = s
	sy.syncLimits.writing[m] = struct{}{}
	m.refsWriting.Add(1)
	return &syncWrite{m: m, s: s, generation: generation, before: m.rec, refs: s.refs}
}

// writeSync makes w's write without mmu, then finishes the sync under it.
func (sy *syncs) writeSync(ctx context.Context, w *syncWrite) (api.SyncResponse, error) {
	defer w.m.refsWriting.Add(-1)
	sy.syncLimits.hook(w.m.rec.ID, "replace")
	failpoint.Inject(failpoint.CoordSyncBeforeReplace)
	err := sy.applySync(ctx, w)
	if err == nil {
		sy.syncLimits.hook(w.m.rec.ID, "replaced")
		err = sy.reapplyLate(ctx, w)
	}
	sy.mp.mmu.Lock()
	defer sy.mp.mmu.Unlock()
	if err == nil && !maps.Equal(w.s.since, w.s.written) {
		err = sy.commit(ctx, lateBatch(w.m.rec.ID, w.s.since)) // the last few, after reapplyLate's rounds
	}
	if err == nil {
		failpoint.Inject(failpoint.CoordSyncAfterReplace)
	}
	return sy.finishSync(ctx, w, err)
}

// hook calls the tests' writeHook, if set.
func (s *syncLimits) hook(node, stage string) {
	if s.writeHook != nil {
		s.writeHook(node, stage)
	}
}

// maxLateRounds bounds reapplyLate's rounds without mmu; what is left is
// written under it.
const maxLateRounds = 4

// reapplyLate writes again the node's own changes made while the sync was
// written, each round those noted by then, until a round finds nothing
// new.
func (sy *syncs) reapplyLate(ctx context.Context, w *syncWrite) error {
	for range maxLateRounds {
		sy.mp.mmu.Lock()
		late := maps.Clone(w.s.since)
		same := maps.Equal(late, w.s.written)
		sy.mp.mmu.Unlock()
		if same {
			return nil
		}
		if err := sy.commit(ctx, lateBatch(w.m.rec.ID, late)); err != nil {
			return err
		}
		sy.mp.mmu.Lock()
		w.s.written = late
		sy.mp.mmu.Unlock()
	}
	return nil
}

// lateBatch writes node's changes late: added or removed.
func lateBatch(node string, late map[string]bool) *refcount.Batch {
	b := new(refcount.Batch)
	for id, added := range late {
		if added {
			b.AddRef(id, node)
		} else {
			b.RemoveRef(id, node)
		}
	}
	return b
}

// finishSync ends w after its write (err: how it went). Written, the node
// is synced, unless its session lapsed or ended meanwhile (its sync is no
// longer current). Failed, it is unsynced: a store that commits in
// groups may have landed part of it, and the node's changes made
// meanwhile may be missing; its next session syncs again. Callers hold
// mmu.
func (sy *syncs) finishSync(ctx context.Context, w *syncWrite, err error) (api.SyncResponse, error) {
	m, s := w.m, w.s
	m.writing = nil
	close(s.ended)
	delete(sy.syncLimits.writing, m)
	current := m.sync == s
	if current {
		sy.endSync(m)
	}
	if err == nil && !current {
		err = fmt.Errorf("sync %s of node %s: written, but the node's session lapsed or ended meanwhile; open a new session and sync again: %w",
			s.id, m.rec.ID, api.ErrNoSession)
	}
	if err == nil {
		err = sy.recordGeneration(ctx, w)
	}
	if err != nil {
		m.synced = false
		return api.SyncResponse{}, err
	}
	m.markSynced(s.id, len(w.refs))
	mode := "full"
	switch {
	case s.buckets != nil:
		mode = "buckets"
	case w.equal:
		mode = "full_equal"
	}
	sy.syncMetrics.syncs.WithLabelValues(mode).Inc()
	log.G(ctx).WithField("node", m.rec.ID).WithField("refs", len(w.refs)).WithField("mode", mode).Info("node synced")
	return api.SyncResponse{Received: len(w.refs), Synced: true}, nil
}

// applySync writes a node's sync: it replaces the node's references, or,
// from a journal generation the coordinator has not had a full sync from
// (a wiped or replaced state dir), only adds them, then records the
// generation (docs/design.md §8.6). It runs without mmu, on the member
// record as it was at the freeze; recordGeneration writes it again if a
// session call changed it meanwhile.
//
// A store with a limit per transaction (etcd, docs/design.md §7.1) may
// commit the batch as several transactions, one atomic group after the
// other, and stop between two (a failure, a failover). So the references
// go in groups that fit (refcount.Manager.ReplaceNodeGroups, or one
// AddRef a group), and the member record, which carries the generation,
// after them. Any prefix is safe:
//   - a node that was unsynced stays so until the whole write is done
//     (finishSync), so deletes wait for it whatever its references are
//     meanwhile; a failed write leaves it unsynced, and it syncs again;
//   - a node that was synced already had every reference it uses stored
//     (docs/design.md §10.5): a group adds only references of its
//     journal and drops only ones its journal no longer holds, and the
//     node's own additions meanwhile count for the delete rule until
//     they are written again;
//   - the generation is recorded only once every reference of it is
//     stored: until then a sync from it only adds again;
//   - the node's hash (sync by hash) is not offered after a failed commit
//     (the Manager marks it dirty), so the next sync sends the whole
//     journal; a new leader builds the hashes from what was committed.
func (sy *syncs) applySync(ctx context.Context, w *syncWrite) error {
	node := w.m.rec.ID
	b := new(refcount.Batch)
	buckets := w.s.buckets
	switch {
	case buckets != nil && w.generation == w.before.Generation:
		if len(buckets.List()) > 0 {
			if _, err := sy.refs.ReplaceNodeGroups(ctx, b, node, buckets, w.refs); err != nil {
				return fmt.Errorf("sync of node %s: %w", node, err)
			}
		}
	case w.generation == w.before.Generation:
		if sy.sameAsStored(node, w.refs) {
			w.equal = true // an older node's unchanged journal (docs/design.md §10.7)
			break
		}
		if _, err := sy.refs.ReplaceNodeGroups(ctx, b, node, nil, w.refs); err != nil {
			return fmt.Errorf("sync of node %s: %w", node, err)
		}
	default:
		// A first sync: its write shares a transaction (syncshare.go),
		// made straight into it.
		_, err := sy.share.write(ctx, node, len(w.refs), func(b *refcount.Batch) { addAll(b, w) }, w.releaseSlot)
		return err
	}
	if rec := w.record(w.before); rec != w.before {
		b.Break().PutMember(rec)
	}
	if w.equal && b.Len() == 0 {
		return nil // nothing to write
	}
	if err := sy.commitSlices(ctx, node, b); err != nil {
		return fmt.Errorf("sync of node %s: %w", node, err)
	}
	return nil
}

// addAll adds to b a first sync's writes: every reference of w, each in
// a group of its own, in key order (the sets are visited in their pages'
// order; the store puts the node index's keys in its own order,
// bolt_nodes.go), then the member record.
func addAll(b *refcount.Batch, w *syncWrite) {
	node := w.m.rec.ID
	b.Grow(len(w.refs) + 1)
	for _, id := range slices.Sorted(maps.Keys(w.refs)) {
		b.AddRef(id, node).Break()
	}
	if rec := w.record(w.before); rec != w.before {
		b.Break().PutMember(rec)
	}
}

// commitSlices commits b a slice at a time (refcount.Batch.Slices, each
// of at most refcount.SliceRefs references, one transaction), so that
// other nodes' writes go in between and a shutdown stops it: once ctx
// ends (the server shuts down, the request is cut) no further slice is
// committed, and the error says how far it went. What was committed is a
// prefix of the write's groups, which applySync makes safe. node's is
// the write (the tests' hook: "slice" after each).
func (sy *syncs) commitSlices(ctx context.Context, node string, b *refcount.Batch) error {
	slices := b.Slices(sy.sliceRefs)
	for i, s := range slices {
		if err := ctx.Err(); err != nil {
			// The server shuts down or the request was cut: the node
			// syncs again at its next session (unavailable, not an
			// internal error).
			return fmt.Errorf("stopped after %d of its %d transactions: %w: %w", i, len(slices), api.ErrUnavailable, err)
		}
		if err := sy.commit(ctx, s); err != nil {
			if len(slices) > 1 {
				return fmt.Errorf("transaction %d of %d: %w", i+1, len(slices), err)
			}
			return err
		}
		sy.syncLimits.hook(node, "slice")
	}
	return nil
}

// releaseSlot gives back w's sync slot, if it holds one.
func (w *syncWrite) releaseSlot() {
	if w.release != nil {
		w.release()
	}
}

// record is rec as a sync from w's generation leaves it: of that
// generation, and no bystander (it synced: bystander.go).
func (w *syncWrite) record(rec refcount.Member) refcount.Member {
	rec.Generation = w.generation
	rec.Bystander = false
	return rec
}

// recordGeneration makes m's record in memory the one applySync wrote;
// if a session call changed the record while the sync was written (its
// write may have landed on either side of applySync's), it writes the
// record again, with both changes. Callers hold mmu.
func (sy *syncs) recordGeneration(ctx context.Context, w *syncWrite) error {
	m := w.m
	rec := w.record(m.rec)
	if m.rec != w.before && rec != m.rec {
		if err := sy.commit(ctx, new(refcount.Batch).PutMember(rec)); err != nil {
			return fmt.Errorf("sync of node %s: %w", rec.ID, err)
		}
	}
	if rec.Generation != w.before.Generation {
		log.G(ctx).WithField("node", rec.ID).WithField("generation", rec.Generation).WithField("previous", w.before.Generation).
			Warn("sync from a new journal generation: references only added, none dropped")
	}
	m.rec = rec
	return nil
}

// writingRefs adds to rc the nodes whose sync is being written and that
// added a reference to resourceID meanwhile: the sync's replace may have
// dropped it, until reapplyLate writes it again. Callers hold mmu.
func (sy *syncs) writingRefs(resourceID string, rc refcount.Set) refcount.Set {
	for m := range sy.syncLimits.writing {
		if m.writing.since[resourceID] && !rc.Has(m.rec.ID) {
			rc = rc.Clone()
			rc.Add(m.rec.ID)
		}
	}
	return rc
}
