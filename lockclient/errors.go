package lockclient

import (
	"context"
	"crypto/tls"
	"errors"
	"net/http"
	"time"

	"github.com/sharedcontent/sharedcontent/lockserver/api"
)

// Lock protocol outcomes. They are the coordinator's own sentinels, so
// errors.Is matches them the same way against a remote coordinator (where the
// client maps the HTTP error codes back) and an embedded one.
var (
	// ErrInUse: a delete (or, with update_requires_no_ref, an update) was
	// refused because other nodes reference the resource. The error is an
	// *api.InUseError carrying who.
	ErrInUse = api.ErrInUse
	// ErrLocked: the lock is held and the request did not wait (TryLock, or
	// a coordinator with allow_multi_node_download=false).
	ErrLocked = api.ErrLocked
	// ErrNotHolder: the lease is unknown to the coordinator: it expired,
	// was released, or the coordinator restarted.
	ErrNotHolder = api.ErrNotHolder
	// ErrDeleting: a reference cannot be added while a delete of the
	// resource is in flight.
	ErrDeleting = api.ErrDeleting
	// ErrInvalidArgument: the request is malformed.
	ErrInvalidArgument = api.ErrInvalidArgument
	// ErrUnauthorized: the bearer token is missing or wrong.
	ErrUnauthorized = api.ErrUnauthorized
	// ErrUnsynced: a delete was refused because a member node is not
	// synced (docs/design.md §8.7); an *api.UnsyncedError names them.
	ErrUnsynced = api.ErrUnsynced
	// ErrWrongCluster: the coordinator belongs to another cluster than
	// the one the client expects (ExpectCluster).
	ErrWrongCluster = api.ErrWrongCluster
	// ErrLate: a session renewal arrived too late to extend the session
	// (docs/design.md §8.8); open a new one.
	ErrLate = api.ErrLate
	// ErrDuplicateNode: another instance holds a live session under this
	// node ID.
	ErrDuplicateNode = api.ErrDuplicateNode
	// ErrRootClaimed: the cluster already has a shared root, and this
	// node's is not it (docs/design.md §8.19).
	ErrRootClaimed = api.ErrRootClaimed
	// ErrNoSession: a reference (POST /refs/add, a pull's unlock with
	// success) was refused because this node holds no live session:
	// open the session again, then retry (docs/design.md §8.4).
	ErrNoSession = api.ErrNoSession
	// ErrUnavailable: the coordinator could not be reached (after the
	// retries), is shutting down, or the Client is closed.
	ErrUnavailable = api.ErrUnavailable
)

// ErrLeaseLost is the error of Lease.Err once Lease.Lost has closed: the
// lease could not be renewed within its TTL, or the coordinator no longer
// knows it. Another node may hold the lock now.
var ErrLeaseLost = errors.New("lock: lease lost")

// refusals are the coordinator's definitive answers: retrying cannot change
// them.
var refusals = []error{
	api.ErrInvalidArgument, api.ErrUnauthorized, api.ErrNotHolder, api.ErrNotFound,
	api.ErrInUse, api.ErrLocked, api.ErrDeleting, api.ErrTooLarge,
	api.ErrUnsynced, api.ErrWrongCluster, api.ErrMemberLive, api.ErrNotExpired, api.ErrLate, api.ErrDuplicateNode,
	api.ErrRootClaimed,
	api.ErrForbidden, api.ErrUnsupportedProtocol, api.ErrNoSession,
}

// retryable reports whether err is transient: a network error, a timeout, a
// 5xx, or anything else that is not a refusal (4xx) by the coordinator or a
// server certificate that does not verify (a configuration error). The
// caller's own context ending is checked separately.
func retryable(err error) bool {
	var badCert *tls.CertificateVerificationError
	if err == nil || errors.Is(err, context.Canceled) || errors.As(err, &badCert) {
		return false
	}
	var se *statusError
	if errors.As(err, &se) && se.status >= 400 && se.status < 500 &&
		se.status != http.StatusRequestTimeout && se.status != http.StatusTooManyRequests {
		return false
	}
	for _, r := range refusals {
		if errors.Is(err, r) {
			return false
		}
	}
	return true
}

// statusError is an HTTP error answer: the error api.FromResponse made of
// the body, with the status that classifies it.
type statusError struct {
	status int
	err    error
	// retryAfter is the answer's Retry-After (a busy coordinator's 429):
	// the retry waits at least that long.
	retryAfter time.Duration
}

// retryAfterOf returns the Retry-After of err's answer, 0 if none.
func retryAfterOf(err error) time.Duration {
	var se *statusError
	if errors.As(err, &se) {
		return se.retryAfter
	}
	return 0
}

func (e *statusError) Error() string { return e.err.Error() }
func (e *statusError) Unwrap() error { return e.err }

// unreachableError is the last transient error of a call that ran out of
// retries. It matches ErrUnavailable as well as the error itself.
type unreachableError struct{ err error }

func (e *unreachableError) Error() string   { return e.err.Error() }
func (e *unreachableError) Unwrap() []error { return []error{ErrUnavailable, e.err} }

func unreachable(err error) error {
	if errors.Is(err, ErrUnavailable) {
		return err
	}
	return &unreachableError{err: err}
}
