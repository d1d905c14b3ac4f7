package api

// OperationType is the kind of operation on a shared resource, and so the
// kind of lock (docs/design.md §3): pull, update or delete. It is defined here, once,
// for the protocol, the client and refcount's callback API.
type OperationType string

// The three operations.
const (
	// OperationPull fetches a resource; on success the node references it
	// and every waiter skips.
	OperationPull OperationType = "pull"
	// OperationUpdate changes a resource's metadata; references are
	// unchanged, and waiters run one after the other.
	OperationUpdate OperationType = "update"
	// OperationDelete removes a resource no other node references; on
	// success its references are dropped and every waiter skips.
	OperationDelete OperationType = "delete"
)

// Valid reports whether t is one of the three operation types.
func (t OperationType) Valid() bool {
	switch t {
	case OperationPull, OperationUpdate, OperationDelete:
		return true
	}
	return false
}

// Limits on request fields.
const (
	// MaxResourceIDLen bounds resource_id (a digest is 71 bytes).
	MaxResourceIDLen = 512
	// MaxIDLen bounds node_id, request_id and lease_id.
	MaxIDLen = 256
	// MaxErrorLen is how much of an unlock's error message the server
	// keeps (for its log); the rest is cut, not refused.
	MaxErrorLen = 4 << 10
	// MaxBodyBytes bounds every request body. Real bodies are a few hundred bytes.
	MaxBodyBytes = 1 << 20
)

// LockRequest is the body of POST /lock.
type LockRequest struct {
	Type       OperationType `json:"type"`
	ResourceID string        `json:"resource_id"`
	NodeID     string        `json:"node_id"`
	// RequestID makes the call idempotent: a retry with the same ID gets the
	// same grant or queue entry instead of queuing behind itself. The server
	// generates one when empty and returns it.
	RequestID string `json:"request_id,omitempty"`
	// Wait asks to be queued when the lock is held. Nil means the server's
	// default (wait_by_default).
	Wait *bool `json:"wait,omitempty"`
	// Reap marks a delete taken by the reaper (docs/design.md §8.12) rather than by a
	// node's own garbage collection: it leaves the requester's references
	// alone. ReapOrphan is granted only when nobody references the
	// resource; ReapDangling ignores the references (the reaper found no
	// blob) and its success drops them. Both obey the synced rule, and
	// only the holder of the reaper's lock (ReapLockResource) may send
	// them; the coordinator also refuses them within its reap grace of
	// the resource's last pull or reference change.
	Reap ReapMode `json:"reap,omitempty"`
	// AddRef, on a pull, asks the coordinator to record the requesting
	// node's reference to the resource when it answers skip (the pull
	// succeeded elsewhere), in the write that records the holder's
	// success, so that the node need not send POST /refs/add
	// (docs/design.md §10.6, lever c). The node must have journaled its
	// use of the resource before it asks (§8.1). The answer says whether
	// the reference was recorded (LockResponse.RefAdded, Event.RefAdded);
	// when it does not (a coordinator that does not know the field, a
	// node without a live session, a delete in flight), the node adds its
	// reference as before. Refused on a delete or an update.
	AddRef bool `json:"add_ref,omitempty"`
}

// ReapMode is LockRequest.Reap.
type ReapMode string

// The reap modes of a delete. Any other value is refused (400), and so is
// a reap mode on a pull or an update: a newer client's new mode must never
// be read by an older coordinator as one of these.
const (
	ReapOrphan   ReapMode = "orphan"
	ReapDangling ReapMode = "dangling"
)

// ReapLockResource is the resource whose update lock the reaper holds
// for its whole pass. The coordinator grants a delete with a reap mode
// only to the node holding that lock with a live lease (else 403
// forbidden), and so is expiring a member (POST /nodes/{id}/expire).
const ReapLockResource = "sharedcontent/reap"

// LockResponse is the answer to POST /lock, and the payload of SSE "state"
// and "granted" events for a request.
type LockResponse struct {
	RequestID  string `json:"request_id"`
	Acquired   bool   `json:"acquired"`
	Skip       bool   `json:"skip"`
	Queued     bool   `json:"queued"`
	Position   int    `json:"position,omitempty"`
	LeaseID    string `json:"lease_id,omitempty"`
	Fence      uint64 `json:"fence,omitempty"`
	LeaseTTLMs int64  `json:"lease_ttl_ms,omitempty"`
	// RefAdded, with Skip, says that the coordinator recorded the
	// requesting node's reference to the resource, as the request asked
	// (LockRequest.AddRef).
	RefAdded bool `json:"ref_added,omitempty"`
}

// UnlockRequest is the body of POST /unlock. Only the holder of LeaseID may
// release; the call is idempotent for the same lease and outcome.
type UnlockRequest struct {
	Type       OperationType `json:"type"`
	ResourceID string        `json:"resource_id"`
	LeaseID    string        `json:"lease_id"`
	// NodeID, when set, must be the lease holder's node (docs/design.md §9).
	NodeID  string `json:"node_id,omitempty"`
	Success bool   `json:"success"`
	// Error is the holder's failure message, for logs and operators.
	Error string `json:"error,omitempty"`
}

// UnlockResponse is the answer to POST /unlock.
type UnlockResponse struct {
	Released bool `json:"released"`
}

// KeepaliveRequest is the body of POST /lock/keepalive.
type KeepaliveRequest struct {
	Type       OperationType `json:"type"`
	ResourceID string        `json:"resource_id"`
	LeaseID    string        `json:"lease_id"`
	// NodeID, when set, must be the lease holder's node (docs/design.md §9).
	NodeID string `json:"node_id,omitempty"`
}

// KeepaliveResponse is the answer to POST /lock/keepalive.
type KeepaliveResponse struct {
	LeaseTTLMs int64 `json:"lease_ttl_ms"`
}

// CancelRequest is the body of POST /lock/cancel: a waiter leaving its queue
// (or giving back a grant it received but no longer wants).
type CancelRequest struct {
	Type       OperationType `json:"type"`
	ResourceID string        `json:"resource_id"`
	// NodeID and RequestID name the request: a request is known by both
	// (docs/design.md §9).
	NodeID    string `json:"node_id"`
	RequestID string `json:"request_id"`
}

// RefsAddRequest is the body of POST /refs/add.
type RefsAddRequest struct {
	ResourceID string `json:"resource_id"`
	NodeID     string `json:"node_id"`
	// Found says the node found the blob in the shared directory and is
	// about to use it. A delete that succeeded since the resource's last
	// pull or reference may still look present to that node (a shared
	// filesystem's attribute and entry caches), so such a reference is
	// refused with ErrDeleting and recorded nowhere. A node committing the
	// blob itself leaves it false.
	Found bool `json:"found,omitempty"`
	// CountOnly asks for an answer without the reference set's nodes
	// (RefsResponse.Nodes null, Count set): a node that adds a reference
	// does not need them, and they grow with the cluster. Nodes and
	// coordinators that predate the field send and get the nodes
	// (docs/design.md §10.2).
	CountOnly bool `json:"count_only,omitempty"`
}

// RefsResponse is the answer to GET /refs and POST /refs/add, and the extra
// detail of an in_use error. The answer to a POST /refs/add with
// count_only has no Nodes, and its Count is the set's size at some moment
// after the reference was added.
type RefsResponse struct {
	ResourceID string   `json:"resource_id"`
	Count      int      `json:"count"`
	Nodes      []string `json:"nodes"`
}

// ClusterHeader is the HTTP header that carries "<cluster_id>/<epoch>" on
// every answer of the coordinator (docs/design.md §8). A node sends its expected
// cluster ID in the same header; a coordinator of another cluster refuses
// the request (409 wrong_cluster) before acting on it.
const ClusterHeader = "Sharedcontent-Cluster"

// ProtocolHeader carries the version of this protocol a client speaks, on
// its requests, and the coordinator's, on every answer. A request naming
// another version is refused (400 unsupported_protocol) before it acts; a
// request without it is taken as ProtocolVersion (clients older than the
// header). The version changes only for incompatible changes: fields are
// added without one, since unknown members are ignored.
const ProtocolHeader = "Sharedcontent-Protocol"

// LeaderHeader carries the URL of the leading replica on a standby's 503
// not_leader answer (docs/design.md §3.8, §7), as ErrorResponse.Leader
// does in its body. It is absent when the standby does not know the leader.
const LeaderHeader = "Sharedcontent-Leader"

// ProtocolVersion is the version of this protocol.
const ProtocolVersion = "1"

// Cluster is the coordinator's identity: ClusterID is created with its
// database, Epoch counts its starts. The answer to GET /cluster.
type Cluster struct {
	ClusterID string `json:"cluster_id"`
	Epoch     uint64 `json:"epoch"`
}

// SessionRequest is the body of POST /nodes/session: open or renew the
// node's session. ClusterID, when set, must be the coordinator's.
//
// A request with a valid Echo (this coordinator's epoch) renews the
// session: the coordinator extends it only if the request arrives at most
// TTL/3 after it was sent, by the echo's measure; a late one is 409 late
// and extends nothing. A request without one (a new session, a node that
// has not heard from this coordinator for 2·TTL/3, an older node) opens a
// session that is not synced until the node syncs in it (docs/design.md
// §8.3).
type SessionRequest struct {
	NodeID    string `json:"node_id"`
	ClusterID string `json:"cluster_id,omitempty"`
	// InstanceID is random per daemon start: while one instance's
	// session is live, another instance with the same node ID is refused
	// (409 duplicate_node). Empty (an older node): not checked, unless the
	// node ID has sent one before (then 400: docs/design.md §8.5).
	InstanceID string `json:"instance_id,omitempty"`
	// Generation is the node's journal generation, which a restart of
	// the same host keeps: the coordinator records it as the node ID's
	// lineage, and refuses a session from another lineage (409
	// duplicate_node) until an operator releases the ID (POST
	// /nodes/{id}/release; docs/design.md §8.5). Empty (an older node):
	// not checked, unless the node ID has sent one before (then 400).
	Generation string `json:"generation,omitempty"`
	Echo       *Echo  `json:"echo,omitempty"`
	// Unclaimed: the node's shared root has no cluster file yet, and the
	// node asks to claim it for this cluster (it sends no Root). The
	// coordinator refuses (409 root_claimed) when the cluster already has
	// a root (Root, or a member that has synced or was adopted), before
	// it records anything of the node: such a root is not the cluster's
	// (the shared storage is not mounted there; docs/design.md §8.19).
	Unclaimed bool `json:"unclaimed,omitempty"`
	// Root is the identity of the shared root the node serves (its
	// cluster file), sent with ClusterID. The coordinator records the
	// first it is sent and refuses a session naming another (409
	// root_claimed): a cluster has one root.
	Root *RootIdentity `json:"root,omitempty"`
	// Identified is set by the coordinator's HTTP side, never sent: the
	// caller authenticated as NodeID (a node token or certificate).
	Identified bool `json:"-"`
}

// Echo is what a node sends back of the last session answer it received:
// its coordinator's stamp, and the node's monotonic time elapsed since it
// received that answer. StampMs + ElapsedMs is never later than the true
// send time in the coordinator's clock (the answer was received after it
// was stamped), so the coordinator's estimate of a message's age is
// conservative.
type Echo struct {
	Epoch     uint64 `json:"epoch"`
	StampMs   int64  `json:"stamp_ms"`
	ElapsedMs int64  `json:"elapsed_ms"`
}

// SessionResponse is the answer to POST /nodes/session.
type SessionResponse struct {
	Cluster
	SessionTTLMs int64 `json:"session_ttl_ms"`
	// Synced reports whether the coordinator has this node's full
	// journal for the current session; a node that reads false syncs.
	Synced bool `json:"synced"`
	// StampMs is the coordinator's monotonic uptime (in this Epoch) when
	// it answered; the node echoes it (Echo).
	StampMs int64 `json:"stamp_ms"`
	// NewMember: the coordinator had no member record of this node
	// before this membership: it says so in every session answer until
	// the node's first sync completes, so a lost answer is not the only
	// one. A node that was a member of this cluster was forgotten
	// meanwhile, and its references dropped.
	NewMember bool `json:"new_member"`
}

// ReleaseResponse is the answer to POST /nodes/{id}/release (admin): the
// node ID no longer belongs to the host whose journal generation was
// Lineage ("": none was recorded); the next host to open its session
// takes it over (docs/design.md §8.5).
type ReleaseResponse struct {
	NodeID  string `json:"node_id"`
	Lineage string `json:"lineage"`
}

// EndSessionRequest is the body of POST /nodes/session/end: a node's
// daemon, shutting down cleanly, ends its own session so that its next
// start (a new instance) need not wait for it to lapse. InstanceID is
// required: only the instance that holds the live session ends it.
type EndSessionRequest struct {
	NodeID     string `json:"node_id"`
	InstanceID string `json:"instance_id"`
}

// EndSessionResponse is the answer to POST /nodes/session/end. Ended: the
// session was the instance's and live, and is over now (the node is
// unsynced: deletes wait for it). Otherwise nothing changed and Reason
// says why (no live session of that node; another instance's session):
// not an error, since there is nothing to retry.
type EndSessionResponse struct {
	Ended  bool   `json:"ended"`
	Reason string `json:"reason,omitempty"`
}

// SyncRequest is the body of PUT /nodes/{id}/refs: one step of a node's
// sync of its full journal (Step). The announcement starts a sync (send
// it before taking the journal's snapshot); chunks carry the snapshot's
// resource IDs; the done chunk (the last, maybe empty) replaces the
// node's references with the union of the chunks, plus whatever the node
// added (minus what it dropped) since the sync started. Between the
// announcement and the chunks, a sync by hash sends its hash steps.
//
// Generation is the journal's random generation ID. A sync from a
// generation the coordinator has not received a full sync from for this
// node (a wiped or replaced state dir) only adds references. The Done
// chunk carries an Echo and is refused late by the renewal rule; without
// one (an older node) it must arrive within TTL/3 of the coordinator's
// last session answer to the node.
type SyncRequest struct {
	// Step is the request's step of the sync. A node sends it with the
	// fields an older coordinator tells the step from (an announcement
	// with no resource IDs and offset 0, a done chunk with Done, a hash
	// step with Hash or BucketHashes), and the coordinator refuses a step
	// its fields contradict. Empty (an older node): the coordinator tells
	// the step from the fields, as it did before steps were named.
	Step        SyncStep `json:"step,omitempty"`
	SyncID      string   `json:"sync_id"`
	ResourceIDs []string `json:"resource_ids"`
	Done        bool     `json:"done"`
	Generation  string   `json:"generation,omitempty"`
	Echo        *Echo    `json:"echo,omitempty"`
	// Offset counts the resource IDs this sync sent before this chunk.
	// A node sets it on every chunk; then a chunk of a sync the
	// coordinator does not know (its start was lost with a lapsed
	// session) is refused unless it starts the sync (offset 0, no
	// resource IDs, not done), so a sync's tail can never replace the
	// node's references alone. Without it every chunk of an unknown sync
	// starts one (older nodes).
	Offset *int `json:"offset,omitempty"`

	// Sync by hash (docs/design.md §10.4). After the
	// announcement (which a coordinator that can compare hashes answers
	// with ByHash), the node sends the hash of its whole snapshot (Hash,
	// offset 0, with an Echo as for Done): when it equals the
	// coordinator's record of the node, the node is synced and nothing is
	// written. Otherwise it sends its bucket hashes (BucketHashes, all
	// SyncBuckets of them, offset 0); the answer names the buckets
	// that differ, and the chunks that follow carry only the resource IDs
	// of those buckets: Done replaces the node's references in those
	// buckets only. A node that sends neither syncs in full, as before.
	Hash         *SyncHash  `json:"hash,omitempty"`
	BucketHashes []SyncHash `json:"bucket_hashes,omitempty"`
}

// SyncStep names one step of a node's sync (SyncRequest.Step).
type SyncStep string

// The steps of a sync, in their order: one announcement, then (a sync by
// hash) the whole hash and maybe the bucket hashes, then chunks, the last
// of them done. A sync by hash whose whole hash is equal ends at its hash
// step.
const (
	SyncStepAnnounce SyncStep = "announce"
	SyncStepHash     SyncStep = "hash"
	SyncStepChunk    SyncStep = "chunk"
	SyncStepDone     SyncStep = "done"
)

// SyncHash is the order-independent hash of a set of resource IDs (a
// node's journal, or one bucket of it): how many, and the sum (mod 2^64)
// of each ID's hash, the first 8 bytes (big-endian) of its SHA-256. An
// ID's bucket is the first of those bytes (SyncBuckets of them).
type SyncHash struct {
	Count uint64 `json:"count"`
	Hash  uint64 `json:"hash"`
}

// SyncBuckets is the number of bucket hashes of a sync by hash.
const SyncBuckets = 256

// SyncResponse is the answer to PUT /nodes/{id}/refs.
type SyncResponse struct {
	// Received counts the resource IDs of the sync so far.
	Received int  `json:"received"`
	Synced   bool `json:"synced"`
	// ByHash, on the announcement: the coordinator compares hashes for
	// this sync (the node's member record is of the same journal
	// generation); the node may send Hash.
	ByHash bool `json:"by_hash,omitempty"`
	// Buckets answers BucketHashes: the buckets whose resource IDs the
	// node sends (those whose hashes differ), in order.
	Buckets []int `json:"buckets,omitempty"`
}

// MaxSyncChunk bounds the resource IDs of one SyncRequest (about 600 KiB
// of digests, under MaxBodyBytes).
const MaxSyncChunk = 8192

// NodeStatus is one member in the answer to GET /nodes.
type NodeStatus struct {
	NodeID string `json:"node_id"`
	// Live: the node holds a session now.
	Live bool `json:"live"`
	// Synced: live, and its journal was received in this session.
	Synced    bool   `json:"synced"`
	FirstSeen string `json:"first_seen"`
	LastSeen  string `json:"last_seen"`
	// AbsentMs is how long the coordinator has not heard from the node,
	// counted in the coordinator's own uptime (since the end of the node's
	// last session, or since the coordinator started, whichever is later;
	// docs/design.md §8.4). Zero while live.
	AbsentMs int64 `json:"absent_ms"`
	// Bystander: the node never named its cluster, never authenticated
	// as itself and never synced; absent longer than BystanderAfterMs,
	// deletes no longer wait for it (docs/design.md §10.3).
	Bystander bool `json:"bystander,omitempty"`
}

// NodesResponse is the answer to GET /nodes.
type NodesResponse struct {
	Cluster
	// NodeExpiryMs is the coordinator's --node-expiry: a member is
	// expired only once both its absence and its marker's staleness
	// reach it.
	NodeExpiryMs int64 `json:"node_expiry_ms"`
	// BystanderAfterMs is the coordinator's --bystander-after (0: off).
	BystanderAfterMs int64        `json:"bystander_after_ms,omitempty"`
	Nodes            []NodeStatus `json:"nodes"`
	// Next, when set, is the node ID to pass as `after` for the next page
	// (GET /nodes?after=&limit=); a request without limit gets every
	// member, as before paging.
	Next string `json:"next,omitempty"`
}

// ExpireRequest is the body of POST /nodes/{id}/expire: the reaper asks
// the coordinator to forget a member it believes gone (docs/design.md
// §8.4). The caller is the node holding the reap lock, named by
// NodeID with that lock's LeaseID, or an admin (no lease).
type ExpireRequest struct {
	NodeID  string `json:"node_id,omitempty"`
	LeaseID string `json:"lease_id,omitempty"`
	// Marker is the state of the member's marker in the shared root as
	// the reaper reads it now: an opaque fingerprint of its content,
	// size and mtime (at most MaxIDLen bytes); empty when it sees none.
	// The coordinator measures how long the same reaper has reported the
	// same state, in its own uptime.
	Marker string `json:"marker,omitempty"`
	// MarkerUnchangedMs is how long the caller has itself seen the
	// member's marker unchanged (its own monotonic clock). The
	// coordinator takes it from an admin only; a reaper's is ignored.
	MarkerUnchangedMs int64 `json:"marker_unchanged_ms"`
}

// ExpireResponse is the answer to POST /nodes/{id}/expire: the member was
// forgotten, with both measures.
type ExpireResponse struct {
	NodeID            string `json:"node_id"`
	AbsentMs          int64  `json:"absent_ms"`
	MarkerUnchangedMs int64  `json:"marker_unchanged_ms"`
	NodeExpiryMs      int64  `json:"node_expiry_ms"`
}

// AdoptRequest is the body of POST /cluster/adopt (admin): the coordinator
// takes the shared root's cluster ID and learns its members (from the
// root's node markers); none of them is synced yet.
type AdoptRequest struct {
	ClusterID string   `json:"cluster_id"`
	Nodes     []string `json:"nodes"`
	// Force adopts even when the coordinator already has members.
	Force bool `json:"force,omitempty"`
}

// RefsEntry is one resource of GET /refs/list.
type RefsEntry struct {
	ResourceID string   `json:"resource_id"`
	Nodes      []string `json:"nodes"`
}

// RefsListResponse is the answer to GET /refs/list?after=&limit=: entries
// in resource ID order after After; Next is the After of the next page
// ("" on the last).
type RefsListResponse struct {
	Entries []RefsEntry `json:"entries"`
	Next    string      `json:"next,omitempty"`
}

// Holder describes the current grant of a key.
type Holder struct {
	NodeID     string `json:"node_id"`
	RequestID  string `json:"request_id"`
	Fence      uint64 `json:"fence"`
	AcquiredAt string `json:"acquired_at"`
	Claimed    bool   `json:"claimed"`
}

// Waiter is one entry of a key's FIFO queue.
type Waiter struct {
	NodeID    string `json:"node_id"`
	RequestID string `json:"request_id"`
	QueuedAt  string `json:"queued_at"`
}

// Completion is a retained successful pull or delete, or a delete whose
// lease lapsed (Lapsed: its holder may or may not have removed the blob).
// Fence is the fence of the lease that completed, when the coordinator
// knows it (0: unknown, e.g. a completion from before its start); a node's
// reaper compares it with the fence a trash entry's name carries
// (docs/design.md §8.11).
type Completion struct {
	NodeID      string `json:"node_id"`
	CompletedAt string `json:"completed_at"`
	Fence       uint64 `json:"fence,omitempty"`
	Lapsed      bool   `json:"lapsed,omitempty"`
}

// StatusQueueHead bounds the waiters a StatusResponse lists: a key may
// have a hundred thousand, and every poll would carry them all.
const StatusQueueHead = 16

// StatusResponse is the answer to GET /lock/status and the payload of the
// first SSE event. Request is filled when the query names a request_id. The
// first event of a stream that follows one request leaves Queue empty: its
// Request.Position says where it stands.
type StatusResponse struct {
	Type       OperationType `json:"type"`
	ResourceID string        `json:"resource_id"`
	Holder     *Holder       `json:"holder,omitempty"`
	Completed  *Completion   `json:"completed,omitempty"`
	// Queue is the head of the queue: its first StatusQueueHead waiters
	// at most. QueueLength counts them all.
	Queue       []Waiter `json:"queue"`
	QueueLength int      `json:"queue_length"`
	// Request is the state of the request named in the query: its grant
	// (Acquired and lease), its skip, or its queue position. A request the
	// server does not know has none of them set.
	Request *LockResponse `json:"request,omitempty"`
}

// Event names of the /lock/subscribe stream.
const (
	// EventState is the first event: a StatusResponse of the key now.
	EventState = "state"
	// EventGranted goes to the waiter that now holds the lock (a LockResponse
	// with its lease), and to watchers. A waiter's stream ends after it, as
	// after EventCompleted and EventError: from then on the lease is kept
	// by keepalives, which report a lost grant.
	EventGranted = "granted"
	// EventCompleted tells waiters the work succeeded elsewhere: skip.
	EventCompleted = "completed"
	// EventReleased tells watchers that a grant ended without success.
	EventReleased = "released"
	// EventError ends a waiter's wait with an ErrorResponse (for example a
	// queued delete that found the resource in use when its turn came).
	EventError = "error"
)

// NodeStreamState is the first event ("state") of a node's event stream,
// GET /lock/events?node_id= (docs/design.md §10.1). From then on the stream carries an Event (granted with its
// lease, completed, or error; RequestID set) for each queued request of
// the node that has no /lock/subscribe stream of its own, and ": keepalive"
// comments. It does not end after an outcome.
type NodeStreamState struct {
	NodeID string `json:"node_id"`
	// Limits are the coordinator's stream limits now (they follow the
	// number of members).
	Limits StreamLimits `json:"limits"`
}

// StreamLimits are the event-stream limits in effect: in all (it grows
// with the number of members), per client IP and per node.
type StreamLimits struct {
	Total   int `json:"total"`
	PerIP   int `json:"per_ip"`
	PerNode int `json:"per_node"`
	// Members is the member count Total was derived from.
	Members int `json:"members"`
	// Older is how many of them are older nodes (a stream per waiting
	// request), and OlderShare the part of Total kept for those
	// streams (docs/design.md §10.7).
	Older      int `json:"older,omitempty"`
	OlderShare int `json:"older_share,omitempty"`
}

// Event is the JSON payload of every SSE event other than "state".
type Event struct {
	// Name is the SSE event name (EventGranted, ...).
	Name       string        `json:"event"`
	Type       OperationType `json:"type"`
	ResourceID string        `json:"resource_id"`
	RequestID  string        `json:"request_id,omitempty"`
	NodeID     string        `json:"node_id,omitempty"`
	// Lease is set on granted events addressed to the new holder.
	Lease *LockResponse `json:"lease,omitempty"`
	// Success is set on released/completed events.
	Success bool `json:"success"`
	// Reason says why a grant ended: "unlock", "expired", "unclaimed", "cancelled".
	Reason string         `json:"reason,omitempty"`
	Error  *ErrorResponse `json:"error,omitempty"`
	// RefAdded is set on a completed event addressed to a waiter whose
	// request asked for its reference (LockRequest.AddRef) when the
	// coordinator recorded it with the holder's success.
	RefAdded bool `json:"ref_added,omitempty"`
}

// Error codes of ErrorResponse.Code.
const (
	CodeInvalidArgument     = "invalid_argument"
	CodeUnauthorized        = "unauthorized"
	CodeNotHolder           = "not_holder"
	CodeNotFound            = "not_found"
	CodeInUse               = "in_use"
	CodeLocked              = "locked"
	CodeDeleting            = "deleting"
	CodeTooLarge            = "too_large"
	CodeUnavailable         = "unavailable"
	CodeInternal            = "internal"
	CodeMethodNotAllowed    = "method_not_allowed"
	CodeUnsynced            = "unsynced"
	CodeWrongCluster        = "wrong_cluster"
	CodeMemberLive          = "member_live"
	CodeTooManyRequests     = "too_many_requests"
	CodeForbidden           = "forbidden"
	CodeUnsupportedProtocol = "unsupported_protocol"
	CodeNotExpired          = "not_expired"
	CodeLate                = "late"
	CodeDuplicateNode       = "duplicate_node"
	CodeRootClaimed         = "root_claimed"
	CodeNotLeader           = "not_leader"
	CodeNoSession           = "no_session"
)

// ErrorResponse is the body of every 4xx/5xx answer.
type ErrorResponse struct {
	Error string `json:"error"`
	Code  string `json:"code"`
	// Refs is set with in_use: who still references the resource.
	Refs *RefsResponse `json:"refs,omitempty"`
	// Nodes is set with unsynced: the members whose references the
	// coordinator does not have in full.
	Nodes []string `json:"nodes,omitempty"`
	// Leader is set with not_leader when the standby knows the leader:
	// its advertised URL (docs/design.md §7).
	Leader string `json:"leader,omitempty"`
}

// HeldLocksMax bounds the locks a HeldLocksResponse lists.
const HeldLocksMax = 1000

// HeldLocksResponse is the answer to GET /locks/held (admin): the locks
// of one type held now, oldest grant first, each with its holder and the
// head of its queue. With type pull (the default) these are the
// cluster's in-flight downloads and the nodes waiting for them
// (`sharedcontentctl top`). Locks lists at most HeldLocksMax; Total
// counts them all.
type HeldLocksResponse struct {
	Type  OperationType    `json:"type"`
	Locks []StatusResponse `json:"locks"`
	Total int              `json:"total"`
}
