package contentv2

import (
	"bytes"
	"context"
	"testing"

	"github.com/containerd/containerd/v2/core/content"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
)

// lapse ends node's session at the coordinator (the member stays, its
// references too): what a node sees when its session lapsed while it
// was away, or when a coordinator lost it.
func (c *fakeCluster) lapse(node string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if m := c.members[node]; m != nil {
		m.live, m.synced = false, false
	}
}

// TestPullAfterNoSessionIsRetried (docs/design.md §8.4): a pull whose
// reference the coordinator refuses for want of a live session
// (api.ErrNoSession: nothing recorded) opens the session again at once
// and retries, and ends with the blob referenced by the node. The real
// coordinator's start grace admits such references right after its start
// (TestPullAfterSessionLapseIsReferenced), so the refusal is made here by
// a session that lapsed.
func TestPullAfterNoSessionIsRetried(t *testing.T) {
	c := newFakeCluster(longTTL)
	s := fakeStore(t, c, t.TempDir(), "node-1")
	awaitJoined(t, s, c)
	ctx := context.Background()

	c.lapse("node-1")
	data, desc := testBlob("after the lapse ")
	require.NoError(t, content.WriteBlob(ctx, s, "layer-"+desc.Digest.String(), bytes.NewReader(data), desc))
	require.Equal(t, []string{"node-1"}, c.nodesOf(desc.Digest.String()), "the pull ends with the blob referenced")
	require.Equal(t, 1.0, testutil.ToFloat64(s.metrics.sessionRefusals.WithLabelValues("no_session")),
		"the reference was refused once for want of a session, then retried")
	rc, err := s.ReaderAt(ctx, desc)
	require.NoError(t, err, "the blob reads back")
	require.NoError(t, rc.Close())
}
