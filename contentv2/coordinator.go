package contentv2

import (
	"context"
	"errors"
	"time"

	"github.com/opencontainers/go-digest"

	"github.com/sharedcontent/sharedcontent/lockserver/api"
)

// Coordinator is what the Store needs of the cluster's coordinator, in the
// Store's own terms: a session for this node, its references, and locks on
// blobs (docs/design.md §3, §8). Package contentv2/remote adapts a lockclient.Client
// (a remote or an embedded coordinator); another backend (etcd) can
// implement it directly.
//
// Refusals are the coordinator's sentinels, those of lockserver/api
// (wrapped; each of an errdefs class), and an answer that the work was
// just done elsewhere is api.ErrSkipped; any other error means the
// coordinator could not be reached or did not answer.
type Coordinator interface {
	// Session opens (req.Echo nil) or renews this node's session.
	// req.ClusterID, when not empty, is the cluster the node belongs to:
	// from then on, a coordinator of another cluster refuses every call
	// with api.ErrWrongCluster instead of acting on it. A renewal that
	// arrives late is api.ErrLate; a live session of another instance under
	// this node ID is api.ErrDuplicateNode.
	Session(ctx context.Context, req SessionRequest) (SessionInfo, error)
	// EndSession ends this node's session if instanceID holds it live:
	// the store calls it once when it closes cleanly, so that the next
	// start of this node (a new instance) is not refused as a duplicate
	// until the session lapses. The node is then unsynced (deletes wait
	// for it), as after a lapse. ended is false, and nothing changed,
	// when the coordinator holds no live session of that instance.
	EndSession(ctx context.Context, instanceID string) (ended bool, err error)
	// SyncRefs replaces the coordinator's record of this node's
	// references with the node's journal (or, from a journal generation
	// it has not synced from, adds them). It announces the sync before it
	// calls req.Snapshot, so that no reference added after the snapshot
	// is lost by the replacement, and calls req.Echo right before it
	// sends the last chunk (api.ErrLate if that is refused as late).
	SyncRefs(ctx context.Context, req SyncRequest) error
	// AddRef records this node as a user of the blob; api.ErrDeleting while a
	// delete of it is in flight, api.ErrNoSession while the coordinator holds
	// no live session of this node. found says the node found the blob in
	// the shared directory (rather than committing it): then api.ErrDeleting
	// also when a delete succeeded since the blob's last pull or
	// reference, since a shared filesystem's caches can show a deleted
	// file for a while (docs/design.md §8.9).
	AddRef(ctx context.Context, dgst digest.Digest, found bool) error
	// Lock takes a lock: req names its operation type, resource and reap
	// mode; its NodeID and RequestID are left to the coordinator's client
	// (this node, a new ID). req.Wait nil (the coordinator's default) or
	// true queues behind the holder; false fails at once with api.ErrLocked,
	// as a coordinator that does not queue waiters by default does for
	// nil. api.ErrSkipped: a pull or delete of the resource just succeeded
	// elsewhere; it also wraps ErrRefAdded when req.AddRef asked the
	// coordinator to record this node's reference with the skip and it
	// did. A delete is api.ErrInUse or api.ErrUnsynced under the delete
	// rule; either way this node's reference is gone.
	Lock(ctx context.Context, req api.LockRequest) (Lock, error)
	// Refs calls fn for every resource the coordinator has references of,
	// in resource ID order.
	Refs(ctx context.Context, fn func(resource string, nodes []string) error) error
	// Members returns the cluster's member nodes, each with how long the
	// coordinator has not heard from it, and the coordinator's node
	// expiry.
	Members(ctx context.Context) (Membership, error)
	// ExpireMember asks the coordinator to forget nodeID, reporting its
	// marker as the reaper (holding reapLock, the reap lock) sees it now
	// (docs/design.md §8.4). The coordinator measures both the node's
	// absence and how long this reaper has reported the same marker
	// state itself; api.ErrNotExpired when the node is live or either
	// measure falls short of the node expiry (each call counts as a
	// report). It returns the coordinator's measure of the absence.
	ExpireMember(ctx context.Context, reapLock Lock, nodeID string, marker MarkerReport) (absent time.Duration, err error)
	// DeleteCompletion returns the coordinator's retained completion of
	// the last delete of dgst (Done false when it retains none): the
	// reaper unlinks a trash entry only when that delete succeeded with
	// the entry's fence or a later one, and restores it otherwise
	// (docs/design.md §8.11).
	DeleteCompletion(ctx context.Context, dgst digest.Digest) (DeleteCompletion, error)
}

// DeleteCompletion is the coordinator's record of a delete that ended.
type DeleteCompletion struct {
	// Done: the coordinator retains a completion of a delete of the blob
	// (for its completed TTL; a pull or a committing reference since ends
	// it).
	Done bool
	// Lapsed: the delete's lease lapsed without an unlock; its holder may
	// or may not have removed the blob.
	Lapsed bool
	// Fence is the completed delete's lease fence; 0 when the coordinator
	// does not know it (a completion from before its start).
	Fence uint64
}

// Succeeded reports whether c proves that a delete of the blob with a
// fence of at least fence succeeded: its unlock(success) committed the drop
// of the blob's references, and no pull or reference followed it.
func (c DeleteCompletion) Succeeded(fence uint64) bool {
	return c.Done && !c.Lapsed && fence > 0 && c.Fence >= fence
}

// Membership is the coordinator's view of the cluster's members.
type Membership struct {
	Nodes []MemberInfo
	// NodeExpiry: a member is expired only once it has been absent this
	// long and its marker unchanged this long.
	NodeExpiry time.Duration
}

// MemberInfo is one member node.
type MemberInfo struct {
	ID   string
	Live bool
	// Absent is how long the coordinator has not heard from it, counted
	// in the coordinator's own uptime (zero while live).
	Absent time.Duration
}

// Lock is a held lock.
type Lock interface {
	// Unlock releases the lock with the outcome of the work. It runs even
	// when ctx is cancelled.
	Unlock(ctx context.Context, success bool, cause error) error
	// Check renews the lock now and fails unless the coordinator still
	// grants it: a deleter calls it right before it removes a file.
	Check(ctx context.Context) error
	// Fence is the lease's fence (docs/design.md §3.5), strictly
	// increasing across the coordinator's grants; 0 when unknown.
	Fence() uint64
	// HeldUntil is a time until which the coordinator surely holds the
	// lease unless its holder released it (a pull lease across a
	// failover too: the next coordinator adopts it, docs/design.md
	// §3.7), counted from the sending of the request that its grant or
	// last renewal answered; zero when unknown or lost.
	HeldUntil() time.Time
}

// SessionRequest is a session call (docs/design.md §8).
type SessionRequest struct {
	ClusterID string
	// InstanceID is random per store start.
	InstanceID string
	// Generation is the journal's generation: the host's lineage, which
	// a restart keeps (docs/design.md §8.5).
	Generation string
	// Echo is nil to open a session, set to renew one.
	Echo *Echo
	// Unclaimed: the node's shared root has no cluster file, and the node
	// asks to claim it (ClusterID is empty). Refused with api.ErrRootClaimed
	// once the cluster has a root (docs/design.md §8.19).
	Unclaimed bool
	// Root is the identity of the root the node serves (its cluster
	// file's creation time and creator), sent with ClusterID; a root
	// other than the cluster's is refused with api.ErrRootClaimed. Zero:
	// not sent.
	Root RootClaim
}

// RootClaim identifies a cluster's shared root: its cluster file's
// creation time and the node that created it.
type RootClaim struct {
	CreatedAt time.Time
	CreatedBy string
}

// Echo is what a node sends back of the last session answer it received:
// the coordinator's stamp (and epoch), and the time elapsed since the node
// received it, by the node's monotonic clock.
type Echo struct {
	Epoch   uint64
	Stamp   time.Duration
	Elapsed time.Duration
}

// SyncRequest is a full sync of the node journal.
type SyncRequest struct {
	// Generation is the journal's random generation ID.
	Generation string
	Snapshot   func() ([]digest.Digest, error)
	// Echo returns the echo for the last chunk, or nil when none may be
	// sent any more (then the sync fails with api.ErrLate).
	Echo func() *Echo
}

// SessionInfo is the coordinator's answer to a session call.
type SessionInfo struct {
	ClusterID string
	Epoch     uint64
	TTL       time.Duration
	// Synced: the coordinator has this node's journal for this session.
	Synced bool
	// Stamp is the coordinator's uptime when it answered (echoed back).
	Stamp time.Duration
	// NewMember: the coordinator had no member record of this node.
	NewMember bool
}

// MarkerReport is the reaper's observation of a member's marker.
type MarkerReport struct {
	// State is an opaque fingerprint of the marker's content, size and
	// mtime; empty when the reaper sees no marker.
	State string
	// Unchanged is how long this reaper has seen State (its own
	// monotonic clock): sent for older coordinators, which took it as it
	// was; a current one measures for itself.
	Unchanged time.Duration
}

// isRefusal reports whether err is the coordinator's answer rather than a
// failure to reach it. api.ErrWrongCluster is not: that coordinator's answers
// are not this cluster's.
func isRefusal(err error) bool {
	for _, e := range []error{api.ErrLocked, api.ErrSkipped, api.ErrInUse, api.ErrUnsynced, api.ErrDeleting} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}
