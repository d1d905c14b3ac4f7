package api

import (
	"errors"
	"fmt"
	"testing"

	"github.com/containerd/errdefs"
	"github.com/stretchr/testify/require"
)

// TestSentinelsWrapErrdefs: every protocol sentinel, wrapped as the server
// and the client wrap them, matches both itself and its errdefs class, and
// no other sentinel.
func TestSentinelsWrapErrdefs(t *testing.T) {
	for _, c := range codes {
		err := fmt.Errorf("pull:sha256:x: %w", c.err)
		if !errors.Is(err, c.err) {
			t.Errorf("%v does not match itself", c.err)
		}
		class := errors.Unwrap(c.err)
		if class == nil || !errors.Is(err, class) {
			t.Errorf("%v wraps no errdefs class", c.err)
		}
		for _, other := range codes {
			if other.err != c.err && errors.Is(err, other.err) {
				t.Errorf("%v matches %v", c.err, other.err)
			}
		}
		back := FromResponse(c.status, ErrorResponse{Error: err.Error(), Code: c.code})
		if !errors.Is(back, c.err) || !errors.Is(back, class) {
			t.Errorf("code %s comes back as %v", c.code, back)
		}
	}
	inUse := fmt.Errorf("delete: %w", &InUseError{Refs: RefsResponse{ResourceID: "x", Count: 1, Nodes: []string{"n"}}})
	if !errors.Is(inUse, ErrInUse) || !errdefs.IsFailedPrecondition(inUse) {
		t.Errorf("InUseError: %v", inUse)
	}
	unsynced := &UnsyncedError{ResourceID: "x", Nodes: []string{"n"}}
	if !errors.Is(unsynced, ErrUnsynced) || !errdefs.IsFailedPrecondition(unsynced) {
		t.Errorf("UnsyncedError: %v", unsynced)
	}
	if !errdefs.IsUnavailable(fmt.Errorf("x: %w", ErrUnavailable)) {
		t.Error("ErrUnavailable is not errdefs unavailable")
	}
}

// TestErrorBody: an error's body carries its message and code, and the
// details of a refused delete, however the error is wrapped.
func TestErrorBody(t *testing.T) {
	inUse := &InUseError{Refs: RefsResponse{ResourceID: "sha256:a", Count: 1, Nodes: []string{"n1"}}}
	body := ErrorBody(fmt.Errorf("delete: %w", inUse))
	require.Equal(t, CodeInUse, body.Code)
	require.Equal(t, "delete: "+inUse.Error(), body.Error)
	require.Equal(t, &inUse.Refs, body.Refs)

	body = ErrorBody(&UnsyncedError{ResourceID: "sha256:a", Nodes: []string{"n2"}})
	require.Equal(t, CodeUnsynced, body.Code)
	require.Equal(t, []string{"n2"}, body.Nodes)
	require.Nil(t, body.Refs)

	body = ErrorBody(errors.New("boom"))
	require.Equal(t, ErrorResponse{Error: "boom", Code: CodeInternal}, body)
	require.Equal(t, CodeLate, Code(fmt.Errorf("x: %w", ErrLate)))
}

// TestNotLeaderBody: a standby's refusal carries the leader's URL in its
// body, and comes back as a *NotLeaderError naming it.
func TestNotLeaderBody(t *testing.T) {
	body := ErrorBody(fmt.Errorf("standby: %w", &NotLeaderError{Leader: "https://c0:8080"}))
	require.Equal(t, CodeNotLeader, body.Code)
	require.Equal(t, "https://c0:8080", body.Leader)
	back := FromResponse(503, body)
	var nl *NotLeaderError
	require.ErrorAs(t, back, &nl)
	require.Equal(t, "https://c0:8080", nl.Leader)
	require.ErrorIs(t, back, ErrNotLeader)
	require.True(t, errdefs.IsUnavailable(back))
	require.Empty(t, ErrorBody(ErrUnavailable).Leader)
}
