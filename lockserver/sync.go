package lockserver

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/sharedcontent/sharedcontent/lockserver/api"
)

// The sync protocol (docs/design.md §8.3, §10.4, §10.5). A node's sync
// is a series of PUT /nodes/{id}/refs requests, each one step
// (api.SyncStep): the announcement starts it, before the node takes its
// journal's snapshot; a sync by hash then sends the whole hash (equal:
// the node is synced and nothing is written, synchash.go) and else the
// bucket hashes; chunks carry the snapshot's resource IDs (all of them,
// or those of the buckets that differ); the done chunk ends it. Each step
// is served under mmu; the done's write is not (syncwrite.go), so no
// session waits for it.
//
// A node names the step (api.SyncRequest.Step). An older node does not:
// its step is told from the fields and the sync's state (stepOf), as the
// coordinator did before steps were named.

// SyncRefs handles PUT /nodes/{id}/refs: one step of the node's sync. At
// most MaxSyncs requests are served at once; more are refused with a
// BusyError (429), as is a chunk past the cluster-wide buffer bound
// (syncbounds.go) and any step of another sync of a node whose sync is
// being written; a retry of the sync being written waits for it.
func (sy *syncs) SyncRefs(ctx context.Context, nodeID string, req api.SyncRequest) (api.SyncResponse, error) {
	if err := validateSync(nodeID, req); err != nil {
		return api.SyncResponse{}, err
	}
	release, held, err := sy.admit(nodeID, req)
	if err != nil {
		return api.SyncResponse{}, err
	}
	// A first sync's write gives its slot back while it waits for its
	// shared transaction (syncshare.go).
	release = sync.OnceFunc(release)
	defer release()
	if err := sy.awaitWrite(ctx, nodeID, req.SyncID); err != nil {
		return api.SyncResponse{}, err
	}
	now := sy.now()
	sy.mp.mmu.Lock()
	resp, w, err := sy.syncStep(ctx, nodeID, req, now, held)
	sy.mp.mmu.Unlock()
	if err != nil || w == nil {
		return resp, err
	}
	if w.release == nil {
		w.release = release
	} else {
		defer w.release() // the slot its done took (olderresync.go)
	}
	return sy.writeSync(ctx, w)
}

// awaitWrite waits, without mmu, until the write of node's sync id ends,
// if it is being written: a retry of its done (whose answer was lost, or
// not yet given when the node's request timed out) is then answered as
// its first was (syncStep), rather than refused as busy.
func (sy *syncs) awaitWrite(ctx context.Context, node, id string) error {
	sy.mp.mmu.Lock()
	var ended chan struct{}
	if m := sy.mp.members[node]; m != nil && m.writing != nil && m.writing.id == id {
		ended = m.writing.ended
	}
	sy.mp.mmu.Unlock()
	if ended == nil {
		return nil
	}
	select {
	case <-ended:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("sync %s of node %s: waiting for its write: %w", id, node, ctx.Err())
	}
}

// syncStep serves one step of node's sync; held says whether the request
// holds a sync slot. The done step returns the write it leaves to the
// caller, who makes it without mmu. Callers hold mmu.
func (sy *syncs) syncStep(ctx context.Context, nodeID string, req api.SyncRequest, now time.Time, held bool) (api.SyncResponse, *syncWrite, error) {
	m, err := sy.mp.liveMember("sync", nodeID, now)
	if err != nil {
		return api.SyncResponse{}, nil, err
	}
	if m.synced && m.done == req.SyncID && (req.Done || req.Hash != nil) {
		return api.SyncResponse{Received: m.doneCount, Synced: true}, nil, nil // a retry
	}
	if m.writing != nil {
		return api.SyncResponse{}, nil, &BusyError{Reason: fmt.Sprintf("sync %s of node %s: its sync %s is being written", req.SyncID, nodeID, m.writing.id),
			RetryAfter: syncRetryAfter}
	}
	s, err := sy.syncOf(m, req, now)
	if err != nil {
		return api.SyncResponse{}, nil, err
	}
	switch stepOf(req, s) {
	case api.SyncStepAnnounce:
		resp, err := sy.syncAnnounce(m, req, now)
		return resp, nil, err
	case api.SyncStepHash:
		resp, err := sy.syncHashStep(ctx, m, req, now)
		return resp, nil, err
	case api.SyncStepChunk:
		resp, err := sy.syncChunk(ctx, m, req, now)
		return resp, nil, err
	default:
		return sy.syncDone(ctx, m, req, now, held)
	}
}

// syncOf returns m's sync that req continues, or starts the one req
// announces. A request of an unknown sync that does not start one (with
// an offset: an older node's chunks have none) is api.ErrNotFound: its
// start was lost, and its tail must not replace the node's references
// alone. Callers hold mmu.
func (sy *syncs) syncOf(m *member, req api.SyncRequest, now time.Time) (*nodeSync, error) {
	if s := m.sync; s != nil && s.id == req.SyncID {
		return s, nil
	}
	if req.Offset != nil && !announces(req) {
		return nil, fmt.Errorf("sync %s of node %s: unknown (its start was lost, e.g. with a lapsed session, or dropped after sync-timeout); start the sync again: %w",
			req.SyncID, m.rec.ID, api.ErrNotFound)
	}
	s := &nodeSync{id: req.SyncID, refs: map[string]struct{}{}, since: map[string]bool{}, touched: now,
		free: olderShaped(req) && sy.resyncOf(m)}
	sy.startSync(m, s)
	return s, nil
}

// syncAnnounce answers the announcement (or its retry): whether the sync
// may go by hash. Callers hold mmu.
func (sy *syncs) syncAnnounce(m *member, req api.SyncRequest, now time.Time) (api.SyncResponse, error) {
	s := m.sync
	if s.sent > 0 || s.buckets != nil {
		return api.SyncResponse{}, fmt.Errorf("sync %s of node %s: announced again after its chunks or hash steps; start a new sync: %w",
			req.SyncID, m.rec.ID, api.ErrInvalidArgument)
	}
	s.touched = now
	return api.SyncResponse{ByHash: sy.canSyncByHash(m, req.Generation)}, nil
}

// syncChunk buffers a chunk of m's sync. Callers hold mmu.
func (sy *syncs) syncChunk(ctx context.Context, m *member, req api.SyncRequest, now time.Time) (api.SyncResponse, error) {
	if err := sy.bufferChunk(ctx, m, req, now); err != nil {
		return api.SyncResponse{}, err
	}
	return api.SyncResponse{Received: len(m.sync.refs)}, nil
}

// syncDone buffers the done chunk of m's sync, applies the timing rule
// to it (timing.go), and returns the sync's write (freezeSync); held says
// whether the request holds a sync slot. An older node's re-sync that
// writes nothing ends here, and one that writes takes its slot here
// (olderresync.go). Callers hold mmu.
func (sy *syncs) syncDone(ctx context.Context, m *member, req api.SyncRequest, now time.Time, held bool) (api.SyncResponse, *syncWrite, error) {
	if err := sy.bufferChunk(ctx, m, req, now); err != nil {
		return api.SyncResponse{}, nil, err
	}
	if err := sy.timing.checkDoneLate(m.rec.ID, m.answered, req.Echo, now); err != nil {
		sy.endSync(m)
		return api.SyncResponse{}, nil, err
	}
	if sy.unchangedResync(m, m.sync, req.Generation) {
		return sy.finishResync(ctx, m, m.sync), nil, nil
	}
	release, err := sy.slotForWrite(m.rec.ID, held)
	if err != nil {
		return api.SyncResponse{}, nil, err
	}
	w := sy.freezeSync(m, req.Generation)
	w.release = release
	return api.SyncResponse{}, w, nil
}

// bufferChunk checks a chunk's place (checkChunkOffset), its bounds and,
// in a sync by hash, that its resource IDs are of the buckets asked for;
// then it buffers them. Callers hold mmu.
func (sy *syncs) bufferChunk(ctx context.Context, m *member, req api.SyncRequest, now time.Time) error {
	s, node := m.sync, m.rec.ID
	retry, err := checkChunkOffset(node, s, req)
	if err != nil {
		return err
	}
	if len(s.refs)+len(req.ResourceIDs) > maxSyncRefs {
		sy.endSync(m)
		return fmt.Errorf("sync of node %s: more than %d references: %w", node, maxSyncRefs, api.ErrInvalidArgument)
	}
	if s.buckets != nil {
		for _, id := range req.ResourceIDs {
			if !s.buckets.Holds(id) {
				return fmt.Errorf("sync of node %s: resource %q is not in a bucket the coordinator asked for: %w", node, id, api.ErrInvalidArgument)
			}
		}
	}
	if err := sy.bufferSync(ctx, m, req.ResourceIDs, now); err != nil {
		return err
	}
	if !retry {
		s.last, s.sent = s.sent, s.sent+len(req.ResourceIDs)
	}
	return nil
}
