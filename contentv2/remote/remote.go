package remote

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/containerd/errdefs"
	"github.com/containerd/log"
	"github.com/opencontainers/go-digest"

	"github.com/sharedcontent/sharedcontent/contentv2"
	"github.com/sharedcontent/sharedcontent/internal/failpoint"
	"github.com/sharedcontent/sharedcontent/internal/synchash"
	"github.com/sharedcontent/sharedcontent/lockclient"
	"github.com/sharedcontent/sharedcontent/lockserver/api"
)

// New returns the contentv2.Coordinator of a sharedcontent coordinator,
// remote or embedded, reached through c (whose node ID is this node's).
// Closing c is the caller's.
func New(c *lockclient.Client) contentv2.Coordinator { return &coordinator{c: c} }

type coordinator struct{ c *lockclient.Client }

func (s *coordinator) Session(ctx context.Context, req contentv2.SessionRequest) (contentv2.SessionInfo, error) {
	if req.ClusterID != "" {
		s.c.ExpectCluster(req.ClusterID)
	}
	wreq := api.SessionRequest{InstanceID: req.InstanceID, Generation: req.Generation, Echo: wireEcho(req.Echo), Unclaimed: req.Unclaimed}
	if !req.Root.CreatedAt.IsZero() {
		wreq.Root = &api.RootIdentity{CreatedAt: req.Root.CreatedAt, CreatedBy: req.Root.CreatedBy}
	}
	resp, err := s.c.Session(ctx, wreq)
	if err != nil {
		return contentv2.SessionInfo{}, err
	}
	return contentv2.SessionInfo{ClusterID: resp.ClusterID, Epoch: resp.Epoch,
		TTL: time.Duration(resp.SessionTTLMs) * time.Millisecond, Synced: resp.Synced,
		Stamp: time.Duration(resp.StampMs) * time.Millisecond, NewMember: resp.NewMember}, nil
}

func (s *coordinator) EndSession(ctx context.Context, instanceID string) (bool, error) {
	resp, err := s.c.EndSession(ctx, instanceID)
	if err != nil {
		return false, err
	}
	if !resp.Ended {
		log.G(ctx).WithField("reason", resp.Reason).Info("the coordinator left this node's session as it is")
	}
	return resp.Ended, nil
}

func wireEcho(e *contentv2.Echo) *api.Echo {
	if e == nil {
		return nil
	}
	return &api.Echo{Epoch: e.Epoch, StampMs: e.Stamp.Milliseconds(), ElapsedMs: e.Elapsed.Milliseconds()}
}

// SyncRefs sends the journal (docs/design.md §8.3): it announces the sync,
// takes the snapshot, and then, when the coordinator can (ByHash), syncs by
// hash (docs/design.md §10.4): the whole hash first (synced
// at once when nothing changed), then the bucket hashes, then only the
// resource IDs of the buckets that differ. An older coordinator gets the
// whole journal.
func (s *coordinator) SyncRefs(ctx context.Context, req contentv2.SyncRequest) error {
	syncID := newSyncID()
	// Announce the sync before the snapshot (see Coordinator.SyncRefs).
	zero := 0
	announce := api.SyncRequest{Step: api.SyncStepAnnounce, SyncID: syncID, ResourceIDs: []string{}, Generation: req.Generation, Offset: &zero}
	resp, err := s.c.SyncRefs(ctx, announce)
	if err != nil {
		return err
	}
	failpoint.Inject(failpoint.StoreSyncAnnounced)
	snap, err := req.Snapshot()
	if err != nil {
		return err
	}
	failpoint.Inject(failpoint.StoreSyncSnapshot)
	ids := make([]string, len(snap))
	for i, d := range snap {
		ids[i] = d.String()
	}
	if resp.ByHash {
		var done bool
		if ids, done, err = s.syncByHash(ctx, syncID, req, ids); err != nil || done {
			return err
		}
	}
	return s.sendChunks(ctx, syncID, req, ids)
}

// syncByHash sends the hash steps of a sync: done when the whole hash
// matched (the node is synced), else the resource IDs of the differing
// buckets, which the chunks then carry.
func (s *coordinator) syncByHash(ctx context.Context, syncID string, req contentv2.SyncRequest, ids []string) (rest []string, done bool, err error) {
	table := synchash.FromIDs(ids)
	whole := api.SyncHash(table.Whole())
	buckets := make([]api.SyncHash, len(table))
	for i, b := range table {
		buckets[i] = api.SyncHash(b)
	}
	e := req.Echo()
	if e == nil {
		return nil, false, fmt.Errorf("sync: too long since the last session answer to finish it: %w", api.ErrLate)
	}
	zero := 0
	resp, err := s.c.SyncRefs(ctx, api.SyncRequest{Step: api.SyncStepHash, SyncID: syncID, Generation: req.Generation, Offset: &zero, Hash: &whole, Echo: wireEcho(e)})
	if err != nil {
		return nil, false, err
	}
	if resp.Synced {
		failpoint.Inject(failpoint.StoreSyncAfterDone) // the sync's last request answered
		return nil, true, nil
	}
	resp, err = s.c.SyncRefs(ctx, api.SyncRequest{Step: api.SyncStepHash, SyncID: syncID, Generation: req.Generation, Offset: &zero, BucketHashes: buckets})
	if err != nil {
		return nil, false, err
	}
	var differ [synchash.Buckets]bool
	for _, b := range resp.Buckets {
		if b >= 0 && b < synchash.Buckets {
			differ[b] = true
		}
	}
	rest = slices.DeleteFunc(ids, func(id string) bool { return !differ[synchash.Bucket(id)] })
	return rest, false, nil
}

// sendChunks sends ids in chunks of api.MaxSyncChunk, the last one Done.
// A chunk the coordinator refuses as busy (429) is sent again after its
// Retry-After by lockclient, so the sync continues where it was.
func (s *coordinator) sendChunks(ctx context.Context, syncID string, req contentv2.SyncRequest, refs []string) error {
	sent := 0
	for {
		n := min(len(refs), api.MaxSyncChunk)
		offset := sent
		chunk := api.SyncRequest{Step: api.SyncStepChunk, SyncID: syncID, ResourceIDs: refs[:n:n], Generation: req.Generation, Offset: &offset}
		sent += n
		refs = refs[n:]
		if len(refs) == 0 {
			chunk.Step, chunk.Done = api.SyncStepDone, true
			e := req.Echo()
			if e == nil {
				return fmt.Errorf("sync: too long since the last session answer to finish it: %w", api.ErrLate)
			}
			chunk.Echo = wireEcho(e)
		}
		if _, err := s.c.SyncRefs(ctx, chunk); err != nil {
			return err
		}
		if len(refs) == 0 {
			failpoint.Inject(failpoint.StoreSyncAfterDone)
			return nil
		}
		failpoint.Inject(failpoint.StoreSyncAfterChunk)
	}
}

func (s *coordinator) AddRef(ctx context.Context, dgst digest.Digest, found bool) error {
	add := s.c.AddRef
	if found {
		add = s.c.AddFoundRef
	}
	_, err := add(ctx, dgst.String())
	return err
}

func (s *coordinator) Lock(ctx context.Context, req api.LockRequest) (contentv2.Lock, error) {
	lr := api.LockRequest{Type: req.Type, ResourceID: req.ResourceID, Reap: req.Reap, AddRef: req.AddRef}
	var (
		res *lockclient.LockResult
		err error
	)
	if req.Wait == nil || *req.Wait {
		res, err = s.c.Lock(ctx, lr)
	} else {
		res, err = s.c.TryLock(ctx, lr)
	}
	switch {
	case err != nil:
		return nil, err
	case res.Skipped && res.RefAdded:
		return nil, fmt.Errorf("%s:%s: %w (%w)", req.Type, req.ResourceID, api.ErrSkipped, contentv2.ErrRefAdded)
	case res.Skipped:
		return nil, fmt.Errorf("%s:%s: %w", req.Type, req.ResourceID, api.ErrSkipped)
	}
	return &lease{c: s.c, l: res.Lease}, nil
}

func (s *coordinator) Refs(ctx context.Context, fn func(resource string, nodes []string) error) error {
	// One page at a time (docs/design.md §10.3); fn's own error is
	// returned as it is.
	var fnErr error
	err := s.c.WalkRefs(ctx, func(e api.RefsEntry) error {
		fnErr = fn(e.ResourceID, e.Nodes)
		return fnErr
	})
	if err != nil && fnErr == nil {
		return err
	}
	return err
}

func (s *coordinator) Members(ctx context.Context) (contentv2.Membership, error) {
	resp, err := s.c.Nodes(ctx)
	if err != nil {
		return contentv2.Membership{}, err
	}
	out := contentv2.Membership{NodeExpiry: time.Duration(resp.NodeExpiryMs) * time.Millisecond, Nodes: make([]contentv2.MemberInfo, len(resp.Nodes))}
	for i, n := range resp.Nodes {
		out.Nodes[i] = contentv2.MemberInfo{ID: n.NodeID, Live: n.Live, Absent: time.Duration(n.AbsentMs) * time.Millisecond}
	}
	return out, nil
}

func (s *coordinator) ExpireMember(ctx context.Context, reapLock contentv2.Lock, nodeID string, marker contentv2.MarkerReport) (time.Duration, error) {
	l, ok := reapLock.(*lease)
	if !ok || l.l.ResourceID != api.ReapLockResource {
		return 0, fmt.Errorf("expire node %s: not the reap lock: %w", nodeID, errdefs.ErrInvalidArgument)
	}
	resp, err := s.c.Expire(ctx, nodeID, l.l, marker.State, marker.Unchanged)
	if errors.Is(err, api.ErrMemberLive) {
		// Live is the first way of not being expired yet
		// (contentv2.Coordinator.ExpireMember).
		err = fmt.Errorf("%w: %w", api.ErrNotExpired, err)
	}
	if err != nil {
		return 0, err
	}
	return time.Duration(resp.AbsentMs) * time.Millisecond, nil
}

// DeleteCompletion reads the delete key's status: its retained completion
// (docs/design.md §8.11). A coordinator from before the completion's
// fence was on the wire answers none (Fence 0), which the reaper reads as
// "not proven": it restores.
func (s *coordinator) DeleteCompletion(ctx context.Context, dgst digest.Digest) (contentv2.DeleteCompletion, error) {
	st, err := s.c.Status(ctx, api.OperationDelete, dgst.String())
	if err != nil {
		return contentv2.DeleteCompletion{}, err
	}
	if st.Completed == nil {
		return contentv2.DeleteCompletion{}, nil
	}
	return contentv2.DeleteCompletion{Done: true, Lapsed: st.Completed.Lapsed, Fence: st.Completed.Fence}, nil
}

// lease is a contentv2.Lock held through a lockclient lease.
type lease struct {
	c *lockclient.Client
	l *lockclient.Lease
}

func (l *lease) Unlock(ctx context.Context, success bool, cause error) error {
	return l.c.Unlock(ctx, l.l, success, cause)
}

func (l *lease) Fence() uint64 { return l.l.Fence }

func (l *lease) HeldUntil() time.Time { return l.l.HeldUntil() }

func (l *lease) Check(ctx context.Context) error {
	if err := l.l.Err(); err != nil {
		return err
	}
	return l.c.Renew(ctx, l.l)
}

// newSyncID returns 128 random bits, hex-encoded.
func newSyncID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
