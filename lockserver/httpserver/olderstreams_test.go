package httpserver

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sharedcontent/sharedcontent/lockserver/api"
)

// TestOlderStreamsHaveTheirShare (docs/design.md §10.7): an older
// member's per-request streams count against a share of their own,
// OlderStreamsPerMember per older member, beside the current members'
// StreamsPerMember each plus StreamSlack: with the current part full, an
// older node still opens its streams, and with the older share full a
// current node still opens its own; an upgraded node leaves the share.
//
// Before: one limit in all, 2 per member plus the slack, which either
// kind could fill.
func TestOlderStreamsHaveTheirShare(t *testing.T) {
	l := newTestCoordinator(t)
	h := NewHandler(l, WithStreamLimits(10000, 10000, 10000))
	ctx := context.Background()
	_, err := l.Session(ctx, api.SessionRequest{NodeID: "old"})
	require.NoError(t, err)
	_, err = l.Session(ctx, api.SessionRequest{NodeID: "cur", InstanceID: "i1"})
	require.NoError(t, err)
	current := StreamsPerMember*1 + StreamSlack
	lim := h.streams.limits()
	require.Equal(t, api.StreamLimits{Total: current + OlderStreamsPerMember, PerIP: 10000, PerNode: 10000, Members: 2, Older: 1,
		OlderShare: OlderStreamsPerMember}, lim)

	var currents []func()
	for range current {
		release, err := h.streams.acquire("10.0.0.1", "cur", streamOfNode)
		require.NoError(t, err)
		currents = append(currents, release)
	}
	_, err = h.streams.acquire("10.0.0.1", "cur", streamOfRequest)
	require.ErrorIs(t, err, api.ErrTooManyRequests, "the current members' part is full")
	require.ErrorContains(t, err, "kept for older nodes' waits")

	var olders []func()
	for range OlderStreamsPerMember {
		release, err := h.streams.acquire("10.0.0.2", "old", streamOfRequest)
		require.NoError(t, err, "an older node's waits have their share while the rest is full")
		olders = append(olders, release)
	}
	_, err = h.streams.acquire("10.0.0.2", "old", streamOfRequest)
	require.ErrorIs(t, err, api.ErrTooManyRequests)
	require.ErrorContains(t, err, "older nodes' waits")
	currents[0]()
	release, err := h.streams.acquire("10.0.0.1", "cur", streamOfNode)
	require.NoError(t, err, "a current node's stream, with the older share full")
	olders[0]()
	_, err = h.streams.acquire("10.0.0.2", "old", streamOfRequest)
	require.NoError(t, err, "the older share frees as its streams end")
	release()

	// Upgraded, the node is a current one: its streams leave the share.
	_, err = l.Session(ctx, api.SessionRequest{NodeID: "old", InstanceID: "i2"})
	require.NoError(t, err)
	lim = h.streams.limits()
	require.Zero(t, lim.Older)
	require.Zero(t, lim.OlderShare)
	require.Equal(t, 2*StreamsPerMember+StreamSlack, lim.Total)
}
