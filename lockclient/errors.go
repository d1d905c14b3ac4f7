package lockclient

import (
	"context"
	"crypto/tls"
	"errors"
	"net/http"
	"time"

	"github.com/sharedcontent/sharedcontent/lockserver/api"
)

// The coordinator's refusals are the sentinels of lockserver/api: errors.Is
// matches them the same way against a remote coordinator (where the client
// maps the HTTP error codes back) and an embedded one, and each wraps its
// errdefs class. ErrLeaseLost is the client's own.

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
// retries. It matches api.ErrUnavailable as well as the error itself.
type unreachableError struct{ err error }

func (e *unreachableError) Error() string   { return e.err.Error() }
func (e *unreachableError) Unwrap() []error { return []error{api.ErrUnavailable, e.err} }

func unreachable(err error) error {
	if errors.Is(err, api.ErrUnavailable) {
		return err
	}
	return &unreachableError{err: err}
}
