package api

import (
	"errors"
	"fmt"
	"net/http"
)

// Sentinel outcomes of the lock protocol. The server returns them (wrapped,
// naming the key) from its in-process API and maps them to HTTP codes at the
// edge; lockclient maps the codes back, so errors.Is works the same against
// an embedded and a remote coordinator.
var (
	// ErrInvalidArgument: the request is malformed.
	ErrInvalidArgument = errors.New("lock: invalid argument")
	// ErrUnauthorized: missing or wrong bearer token.
	ErrUnauthorized = errors.New("lock: unauthorized")
	// ErrNotHolder: the lease is unknown, expired or belongs to another grant.
	ErrNotHolder = errors.New("lock: not the holder of this lease")
	// ErrNotFound: the request or key is unknown.
	ErrNotFound = errors.New("lock: not found")
	// ErrInUse: a delete (or, with update_requires_no_ref, an update) was
	// refused because other nodes reference the resource.
	ErrInUse = errors.New("lock: resource in use by other nodes")
	// ErrLocked: the lock is held and the request asked not to wait.
	ErrLocked = errors.New("lock: held by another request")
	// ErrDeleting: a reference cannot be added while a delete is in flight.
	ErrDeleting = errors.New("lock: resource is being deleted")
	// ErrTooLarge: the request body exceeds MaxBodyBytes.
	ErrTooLarge = errors.New("lock: request body too large")
	// ErrUnavailable: the server is shutting down or cannot serve.
	ErrUnavailable = errors.New("lock: unavailable")
	// ErrMethodNotAllowed: the endpoint exists but not with this method.
	ErrMethodNotAllowed = errors.New("lock: method not allowed")
	// ErrUnsynced: a delete was refused because a member node is not
	// synced (SPEC §8): its references may be missing. The error is an
	// *UnsyncedError naming them.
	ErrUnsynced = errors.New("lock: members not synced")
	// ErrWrongCluster: the request named another cluster than the
	// coordinator's (a wiped coordinator, or a node of another cluster).
	ErrWrongCluster = errors.New("lock: wrong cluster")
	// ErrMemberLive: a member with a live session cannot be forgotten.
	ErrMemberLive = errors.New("lock: member has a live session")
	// ErrUnsupportedProtocol: the client and the coordinator speak
	// different versions of this protocol (ProtocolHeader).
	ErrUnsupportedProtocol = errors.New("lock: unsupported protocol version")
	// ErrForbidden: the caller is authenticated but may not do this: act
	// as another node, or make an admin call without the admin identity.
	ErrForbidden = errors.New("lock: forbidden")
	// ErrTooManyRequests: a bound was reached (event streams); retry
	// later.
	ErrTooManyRequests = errors.New("lock: too many requests")
)

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
	{ErrTooManyRequests, CodeTooManyRequests, http.StatusTooManyRequests},
	{ErrForbidden, CodeForbidden, http.StatusForbidden},
	{ErrUnsupportedProtocol, CodeUnsupportedProtocol, http.StatusBadRequest},
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

// InUseError is the error of a refused delete: it carries who still
// references the resource. It matches ErrInUse.
type InUseError struct {
	Refs RefsResponse
}

func (e *InUseError) Error() string {
	return fmt.Sprintf("%s %s: %d other node(s) %v", ErrInUse, e.Refs.ResourceID, e.Refs.Count, e.Refs.Nodes)
}

// Is makes errors.Is(err, ErrInUse) true.
func (e *InUseError) Is(target error) bool { return target == ErrInUse }

// UnsyncedError is the error of a delete refused under the synced rule: it
// names the members that are not synced. It matches ErrUnsynced.
type UnsyncedError struct {
	ResourceID string
	Nodes      []string
}

func (e *UnsyncedError) Error() string {
	return fmt.Sprintf("%s: delete %s refused until node(s) %v sync their references", ErrUnsynced, e.ResourceID, e.Nodes)
}

// Is makes errors.Is(err, ErrUnsynced) true.
func (e *UnsyncedError) Is(target error) bool { return target == ErrUnsynced }

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
	for _, c := range codes {
		if c.code == body.Code {
			return &remoteError{sentinel: c.err, msg: body.Error}
		}
	}
	return fmt.Errorf("lock server: HTTP %d %s: %s", status, body.Code, body.Error)
}

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
