package api

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/containerd/errdefs"
)

// Sentinel outcomes of the lock protocol. The server returns them (wrapped,
// naming the key) from its in-process API and maps them to HTTP codes at the
// edge; lockclient maps the codes back, so errors.Is works the same against
// an embedded and a remote coordinator. Each wraps the errdefs class it
// belongs to (ErrInUse is a failed precondition, ErrUnavailable is
// unavailable, ...), so one check, errdefs.IsUnavailable say, works on
// every error of the project.
var (
	// ErrInvalidArgument: the request is malformed.
	ErrInvalidArgument = newSentinel("lock: invalid argument", errdefs.ErrInvalidArgument)
	// ErrUnauthorized: missing or wrong bearer token.
	ErrUnauthorized = newSentinel("lock: unauthorized", errdefs.ErrUnauthenticated)
	// ErrNotHolder: the lease is unknown, expired or belongs to another grant.
	ErrNotHolder = newSentinel("lock: not the holder of this lease", errdefs.ErrPermissionDenied)
	// ErrNotFound: the request or key is unknown.
	ErrNotFound = newSentinel("lock: not found", errdefs.ErrNotFound)
	// ErrInUse: a delete (or, with update_requires_no_ref, an update) was
	// refused because other nodes reference the resource.
	ErrInUse = newSentinel("lock: resource in use by other nodes", errdefs.ErrFailedPrecondition)
	// ErrLocked: the lock is held and the request asked not to wait.
	ErrLocked = newSentinel("lock: held by another request", errdefs.ErrConflict)
	// ErrDeleting: a reference cannot be added while a delete is in flight.
	ErrDeleting = newSentinel("lock: resource is being deleted", errdefs.ErrConflict)
	// ErrTooLarge: the request body exceeds MaxBodyBytes.
	ErrTooLarge = newSentinel("lock: request body too large", errdefs.ErrInvalidArgument)
	// ErrUnavailable: the server is shutting down or cannot serve.
	ErrUnavailable = newSentinel("lock: unavailable", errdefs.ErrUnavailable)
	// ErrMethodNotAllowed: the endpoint exists but not with this method.
	ErrMethodNotAllowed = newSentinel("lock: method not allowed", errdefs.ErrNotImplemented)
	// ErrUnsynced: a delete was refused because a member node is not
	// synced (docs/design.md §8.7): its references may be missing. The error is an
	// *UnsyncedError naming them.
	ErrUnsynced = newSentinel("lock: members not synced", errdefs.ErrFailedPrecondition)
	// ErrWrongCluster: the request named another cluster than the
	// coordinator's (a wiped coordinator, or a node of another cluster).
	ErrWrongCluster = newSentinel("lock: wrong cluster", errdefs.ErrFailedPrecondition)
	// ErrMemberLive: a member with a live session cannot be forgotten.
	ErrMemberLive = newSentinel("lock: member has a live session", errdefs.ErrFailedPrecondition)
	// ErrNotExpired: a member may not be expired yet (docs/design.md
	// §8.4): the coordinator has heard from it, or the marker
	// staleness reported, within node_expiry.
	ErrNotExpired = newSentinel("lock: member not expired", errdefs.ErrFailedPrecondition)
	// ErrLate: a session renewal (or the last chunk of a sync) arrived
	// more than TTL/3 after it was sent, or more than 2·TTL/3 after the
	// answer it echoes: it extends nothing, and the node opens a new
	// session, unsynced.
	ErrLate = newSentinel("lock: session message arrived late", errdefs.ErrFailedPrecondition)
	// ErrDuplicateNode: another instance (another host or daemon) holds a
	// live session under the same node ID.
	ErrDuplicateNode = newSentinel("lock: duplicate node id", errdefs.ErrAlreadyExists)
	// ErrRootClaimed: the cluster already has a shared root, and the
	// node's is not it (docs/design.md §8.19): a root with no cluster file
	// (not mounted, empty) or with another cluster file of this cluster.
	ErrRootClaimed = newSentinel("lock: the cluster has another shared root", errdefs.ErrFailedPrecondition)
	// ErrUnsupportedProtocol: the client and the coordinator speak
	// different versions of this protocol (ProtocolHeader).
	ErrUnsupportedProtocol = newSentinel("lock: unsupported protocol version", errdefs.ErrNotImplemented)
	// ErrForbidden: the caller is authenticated but may not do this: act
	// as another node, or make an admin call without the admin identity.
	ErrForbidden = newSentinel("lock: forbidden", errdefs.ErrPermissionDenied)
	// ErrTooManyRequests: a bound was reached (event streams); retry
	// later.
	ErrTooManyRequests = newSentinel("lock: too many requests", errdefs.ErrResourceExhausted)
	// ErrNotLeader: this replica is a standby (docs/design.md §7); the
	// leader, when known, is named by a *NotLeaderError.
	ErrNotLeader = newSentinel("lock: not the leader", errdefs.ErrUnavailable)
	// ErrNoSession: a reference was refused because its node holds no
	// live session (docs/design.md §8.4): it lapsed, the coordinator
	// restarted or failed over, or the node was forgotten. Nothing was
	// recorded; the node opens its session again, then retries.
	ErrNoSession = newSentinel("lock: no live session", errdefs.ErrFailedPrecondition)
)

// ErrSkipped is the answer to a pull or delete that another request has
// just completed (docs/design.md §3.3): the blob exists, or is already
// gone. It is an answer, not a refusal: on the wire it is
// LockResponse.Skip, lockclient reports it as LockResult.Skipped, and
// contentv2.Coordinator.Lock returns it (wrapped). It has no errdefs class:
// a skipped pull means the blob exists, a skipped delete that it is gone.
var ErrSkipped = errors.New("lock: done by another request")

// sentinel is a protocol outcome of an errdefs class.
type sentinel struct {
	msg   string
	class error
}

func newSentinel(msg string, class error) error { return &sentinel{msg: msg, class: class} }

func (e *sentinel) Error() string { return e.msg }

// Unwrap makes errors.Is(err, class) and errdefs.IsXxx true.
func (e *sentinel) Unwrap() error { return e.class }

var codes = []struct {
	err    error
	code   string
	status int
}{
	{ErrInvalidArgument, CodeInvalidArgument, http.StatusBadRequest},
	{ErrUnauthorized, CodeUnauthorized, http.StatusUnauthorized},
	{ErrNotHolder, CodeNotHolder, http.StatusForbidden},
	{ErrNotFound, CodeNotFound, http.StatusNotFound},
	{ErrInUse, CodeInUse, http.StatusConflict},
	{ErrLocked, CodeLocked, http.StatusConflict},
	{ErrDeleting, CodeDeleting, http.StatusConflict},
	{ErrTooLarge, CodeTooLarge, http.StatusRequestEntityTooLarge},
	{ErrUnavailable, CodeUnavailable, http.StatusServiceUnavailable},
	{ErrMethodNotAllowed, CodeMethodNotAllowed, http.StatusMethodNotAllowed},
	{ErrUnsynced, CodeUnsynced, http.StatusConflict},
	{ErrWrongCluster, CodeWrongCluster, http.StatusConflict},
	{ErrMemberLive, CodeMemberLive, http.StatusConflict},
	{ErrNotExpired, CodeNotExpired, http.StatusConflict},
	{ErrLate, CodeLate, http.StatusConflict},
	{ErrDuplicateNode, CodeDuplicateNode, http.StatusConflict},
	{ErrRootClaimed, CodeRootClaimed, http.StatusConflict},
	{ErrTooManyRequests, CodeTooManyRequests, http.StatusTooManyRequests},
	{ErrForbidden, CodeForbidden, http.StatusForbidden},
	{ErrUnsupportedProtocol, CodeUnsupportedProtocol, http.StatusBadRequest},
	{ErrNotLeader, CodeNotLeader, http.StatusServiceUnavailable},
	{ErrNoSession, CodeNoSession, http.StatusConflict},
}

// HTTPStatus returns the HTTP status and code for err. Errors that match no
// sentinel are internal (500).
func HTTPStatus(err error) (status int, code string) {
	for _, c := range codes {
		if errors.Is(err, c.err) {
			return c.status, c.code
		}
	}
	return http.StatusInternalServerError, CodeInternal
}

// Code returns the wire code of err (api.ErrorResponse.Code):
// CodeInternal when it matches no sentinel.
func Code(err error) string {
	_, code := HTTPStatus(err)
	return code
}

// ErrorBody is the ErrorResponse that carries err to a client, in an
// answer or an event: its message and code, and who references the
// resource (InUseError) or which members have not synced (UnsyncedError).
func ErrorBody(err error) ErrorResponse {
	body := ErrorResponse{Error: err.Error(), Code: Code(err)}
	var inUse *InUseError
	if errors.As(err, &inUse) {
		body.Refs = &inUse.Refs
	}
	var unsynced *UnsyncedError
	if errors.As(err, &unsynced) {
		body.Nodes = unsynced.Nodes
	}
	var notLeader *NotLeaderError
	if errors.As(err, &notLeader) {
		body.Leader = notLeader.Leader
	}
	return body
}

// InUseError is the error of a refused delete: it carries who still
// references the resource. It matches ErrInUse.
type InUseError struct {
	Refs RefsResponse
}

func (e *InUseError) Error() string {
	return fmt.Sprintf("%s %s: %d other node(s) %v", ErrInUse, e.Refs.ResourceID, e.Refs.Count, e.Refs.Nodes)
}

// Unwrap makes errors.Is(err, ErrInUse) true, and its errdefs class.
func (e *InUseError) Unwrap() error { return ErrInUse }

// UnsyncedError is the error of a delete refused under the synced rule: it
// names the members that are not synced. It matches ErrUnsynced.
type UnsyncedError struct {
	ResourceID string
	Nodes      []string
}

func (e *UnsyncedError) Error() string {
	return fmt.Sprintf("%s: delete %s refused until node(s) %v sync their references", ErrUnsynced, e.ResourceID, e.Nodes)
}

// Unwrap makes errors.Is(err, ErrUnsynced) true, and its errdefs class.
func (e *UnsyncedError) Unwrap() error { return ErrUnsynced }

// FromResponse turns an error body back into an error that matches the
// sentinel of its code (and carries the message). Unknown codes give a
// plain error with the status.
func FromResponse(status int, body ErrorResponse) error {
	if body.Code == CodeInUse && body.Refs != nil {
		return &InUseError{Refs: *body.Refs}
	}
	if body.Code == CodeUnsynced {
		return &UnsyncedError{Nodes: body.Nodes}
	}
	if body.Code == CodeNotLeader {
		return &NotLeaderError{Leader: body.Leader}
	}
	for _, c := range codes {
		if c.code == body.Code {
			return &remoteError{sentinel: c.err, msg: body.Error}
		}
	}
	return fmt.Errorf("coordinator: HTTP %d %s: %s", status, body.Code, body.Error)
}

// NotLeaderError is a standby's refusal (docs/design.md §7): it names
// the leader's URL when the standby knows it (empty otherwise). It
// matches ErrNotLeader.
type NotLeaderError struct {
	Leader string
}

func (e *NotLeaderError) Error() string {
	if e.Leader == "" {
		return fmt.Sprintf("%s; the leader is not known yet", ErrNotLeader)
	}
	return fmt.Sprintf("%s; the leader is %s", ErrNotLeader, e.Leader)
}

// Unwrap makes errors.Is(err, ErrNotLeader) true, and its errdefs class.
func (e *NotLeaderError) Unwrap() error { return ErrNotLeader }

type remoteError struct {
	sentinel error
	msg      string
}

func (e *remoteError) Error() string {
	if e.msg == "" {
		return e.sentinel.Error()
	}
	return e.msg
}

func (e *remoteError) Unwrap() error { return e.sentinel }
