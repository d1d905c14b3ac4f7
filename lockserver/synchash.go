package lockserver

import (
	"context"
	"fmt"
	"time"

	"github.com/containerd/log"

	"github.com/sharedcontent/sharedcontent/internal/failpoint"
	"github.com/sharedcontent/sharedcontent/internal/synchash"
	"github.com/sharedcontent/sharedcontent/lockserver/api"
	"github.com/sharedcontent/sharedcontent/refcount"
)

// Sync by hash (docs/design.md §10.4). The refcount Manager
// keeps each node's hash (synchash.Table) on every reference it adds or
// drops, built at start by one walk of the references. After the
// announcement, a node of the same journal generation sends its
// snapshot's whole hash: equal, it is synced with nothing written.
// Otherwise it sends its bucket hashes, and the sync continues as a full
// one restricted to the buckets that differ.

// The wire's bucket count is the hash's.
var _ [api.SyncBuckets - synchash.Buckets]struct{}
var _ [synchash.Buckets - api.SyncBuckets]struct{}

// isHashStep reports whether req is a step of a sync by hash.
func isHashStep(req api.SyncRequest) bool { return req.Hash != nil || req.BucketHashes != nil }

// validateHashStep checks the shape of a hash step: one of Hash and
// BucketHashes, every bucket, no resource IDs, not Done, offset 0.
func validateHashStep(node string, req api.SyncRequest) error {
	if !isHashStep(req) {
		return nil
	}
	switch {
	case req.Hash != nil && req.BucketHashes != nil:
		return fmt.Errorf("sync of node %s: hash and bucket_hashes in one request: %w", node, api.ErrInvalidArgument)
	case req.BucketHashes != nil && len(req.BucketHashes) != api.SyncBuckets:
		return fmt.Errorf("sync of node %s: %d bucket hashes, want %d: %w", node, len(req.BucketHashes), synchash.Buckets, api.ErrInvalidArgument)
	case len(req.ResourceIDs) > 0 || req.Done || req.Offset == nil || *req.Offset != 0:
		return fmt.Errorf("sync of node %s: a hash step carries no resource IDs, is not done and has offset 0: %w", node, api.ErrInvalidArgument)
	}
	return nil
}

// canSyncByHash reports whether m's sync may compare hashes: the
// coordinator's record of m is of the journal generation the node syncs
// from (otherwise the sync only adds: applySync), and the hashes are
// built. Callers hold mmu.
func (sy *syncs) canSyncByHash(m *member, generation string) bool {
	_, built := sy.refs.NodeHash(m.rec.ID)
	return built && generation == m.rec.Generation
}

// syncHashStep answers a hash step of m's sync. Callers hold mmu.
func (sy *syncs) syncHashStep(ctx context.Context, m *member, req api.SyncRequest, now time.Time) (api.SyncResponse, error) {
	s := m.sync
	node := m.rec.ID
	if !sy.canSyncByHash(m, req.Generation) {
		return api.SyncResponse{}, fmt.Errorf("sync of node %s: not by hash (another journal generation); send the whole journal: %w", node, api.ErrInvalidArgument)
	}
	if len(s.refs) > 0 || s.buckets != nil {
		return api.SyncResponse{}, fmt.Errorf("sync of node %s: a hash step after chunks; start the sync again: %w", node, api.ErrInvalidArgument)
	}
	s.touched = now
	kept, _ := sy.refs.NodeHash(node)
	if req.Hash != nil {
		if synchash.Sum(*req.Hash) != kept.Whole() {
			return api.SyncResponse{}, nil
		}
		// Equal: the coordinator has the node's journal; nothing to write.
		if err := sy.timing.checkDoneLate(node, m.answered, req.Echo, now); err != nil {
			sy.endSync(m)
			return api.SyncResponse{}, err
		}
		sy.endSync(m)
		// Nothing to write: the crash points of a sync's replace are
		// here, on either side of making the node synced.
		failpoint.Inject(failpoint.CoordSyncBeforeReplace)
		m.markSynced(s.id, int(req.Hash.Count))
		failpoint.Inject(failpoint.CoordSyncAfterReplace)
		sy.syncMetrics.syncs.WithLabelValues("hash").Inc()
		log.G(ctx).WithField("node", node).WithField("refs", req.Hash.Count).Info("node synced by hash")
		return api.SyncResponse{Received: int(req.Hash.Count), Synced: true}, nil
	}
	var sent synchash.Table
	for i, h := range req.BucketHashes {
		sent[i] = synchash.Sum(h)
	}
	differ := kept.Differ(&sent)
	s.buckets = new(refcount.BucketSet)
	for _, b := range differ {
		s.buckets[b] = true
	}
	return api.SyncResponse{Buckets: differ}, nil
}

// sameAsStored reports whether refs are exactly node's stored references,
// by the node's hash as the Manager keeps it, when that hash is exact
// (NodeHash): a full sync of the journal the coordinator already has (an
// older node's, which cannot sync by hash: docs/design.md §10.7) then
// writes nothing. A collision costs what it costs a sync by hash (§10.4).
// O(len(refs)); no storage read.
func (sy *syncs) sameAsStored(node string, refs map[string]struct{}) bool {
	kept, exact := sy.refs.NodeHash(node)
	if !exact {
		return false
	}
	var fresh synchash.Table
	for id := range refs {
		fresh.Add(id)
	}
	return fresh.Whole() == kept.Whole()
}
