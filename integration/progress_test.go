package integration

import (
	"testing"
	"time"

	"github.com/containerd/containerd/v2/core/remotes"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"
)

// TestFollowerShowsHolderProgress (docs/design.md §5.10): while the holder
// writes a blob, the follower's node reports, for its waiting ingest, the
// bytes the holder has written so far (what `ctr pull` draws), through its
// containerd metadata as through the proxy; the holder's node counts the
// download and its bytes in flight, the follower's its waiting follower;
// once the holder commits, the follower shares the blob without a GET and
// its wait is counted as shared.
func TestFollowerShowsHolderProgress(t *testing.T) {
	forBothPaths(t, func(t *testing.T, proxied bool) {
		sc := newFollowScene(t, "progress ", proxied)
		c, admin, holder, ctx, data, desc := sc.c, sc.admin, sc.holder, sc.ctx, sc.data, sc.desc
		follower := c.addFollowNode(t, "follower", proxied)
		w := sc.holdLock(t) // the fake slow holder: it writes when the test says
		require.Equal(t, 1.0, gauge(t, holder.metrics, "sharedcontent_store_downloads_in_flight"))

		ff := &gatedFetcher{data: data}
		followerDone := make(chan error, 1)
		go func() { followerDone <- remotes.Fetch(ctx, follower.cs, ff, desc) }()
		c.waitQueued(t, admin.client, desc.Digest, 1)
		require.Equal(t, 1.0, gauge(t, follower.metrics, "sharedcontent_store_followers_waiting"))

		offset := func() int64 {
			sts, err := follower.cs.ListStatuses(ctx)
			require.NoError(t, err)
			require.Len(t, sts, 1, "the waiting follower is an ingest of its node")
			require.Equal(t, desc.Size, sts[0].Total)
			return sts[0].Offset
		}
		const steps = 4
		chunk := len(data) / steps
		for i := range steps {
			end := (i + 1) * chunk
			if i == steps-1 {
				end = len(data)
			}
			_, err := w.Write(data[i*chunk : end])
			require.NoError(t, err)
			require.Equal(t, float64(end), gauge(t, holder.metrics, "sharedcontent_store_download_bytes_in_flight"))
			// The follower looks at most once a second for an ingest it
			// has not found yet; once found, each status reads it.
			require.Eventually(t, func() bool { return offset() == int64(end) }, 20*time.Second, 10*time.Millisecond,
				"the follower reports the holder's %d bytes", end)
			st, err := follower.cs.Status(ctx, remotes.MakeRefKey(ctx, desc))
			require.NoError(t, err, "the fetch's ingest ref")
			require.Equal(t, int64(end), st.Offset)
		}
		select {
		case err := <-followerDone:
			t.Fatalf("the follower finished before the holder committed: %v", err)
		default:
		}

		require.NoError(t, w.Commit(ctx, desc.Size, desc.Digest))
		require.NoError(t, <-followerDone)
		require.Zero(t, ff.gets.Load(), "the follower did not download")
		requireHasBlob(t, ctx, follower, data, desc)
		require.Equal(t, 0.0, gauge(t, holder.metrics, "sharedcontent_store_downloads_in_flight"))
		require.Equal(t, 0.0, gauge(t, holder.metrics, "sharedcontent_store_download_bytes_in_flight"))
		require.Equal(t, 0.0, gauge(t, follower.metrics, "sharedcontent_store_followers_waiting"))
		require.Equal(t, uint64(1), waits(t, follower.metrics, "shared"))
		require.Equal(t, uint64(0), waits(t, follower.metrics, "handed"))
	})
}

// gauge reads a gauge without labels from reg.
func gauge(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	m := metricOf(reg, name, "", "")
	require.NotNil(t, m, "no metric %s", name)
	return m.GetGauge().GetValue()
}

// waits reads the count of follower waits that ended with outcome.
func waits(t *testing.T, reg *prometheus.Registry, outcome string) uint64 {
	t.Helper()
	m := metricOf(reg, "sharedcontent_store_follower_wait_seconds", "outcome", outcome)
	require.NotNil(t, m, "no follower waits with outcome %s", outcome)
	return m.GetHistogram().GetSampleCount()
}

// metricOf returns the series of metric name in reg whose label is
// value ("" label: the first series), or nil.
func metricOf(reg *prometheus.Registry, name, label, value string) *dto.Metric {
	mfs, err := reg.Gather()
	if err != nil {
		return nil
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if label == "" {
				return m
			}
			for _, l := range m.GetLabel() {
				if l.GetName() == label && l.GetValue() == value {
					return m
				}
			}
		}
	}
	return nil
}
