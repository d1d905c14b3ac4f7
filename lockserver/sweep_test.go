package lockserver

import (
	"context"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sharedcontent/sharedcontent/lockserver/api"
)

// TestSweepShrinksEmptiedMaps: once a shard's maps have emptied well below
// their peak, the sweep replaces them with maps sized for what is left
// (Go maps keep their largest size's buckets), keeping every entry; maps
// still near their peak are left alone.
func TestSweepShrinksEmptiedMaps(t *testing.T) {
	// One shard; the sweeps that matter are driven by hand. With a lease
	// TTL of a minute the background sweeper forgets no released lease
	// and expires no lock meanwhile.
	coord := newTestCoordinator(t, func(c *Config) { c.Shards = 1; c.LeaseTTL = time.Minute; c.ClaimTimeout = time.Hour })
	ctx := context.Background()
	sh := coord.locks.shards[0]
	// mapOf identifies a map's storage, under the shard's mutex.
	mapOf := func(m func() any) uintptr {
		sh.mu.Lock()
		defer sh.mu.Unlock()
		return reflect.ValueOf(m()).Pointer()
	}
	resources := func() any { return sh.resources }
	released := func() any { return sh.released }
	lens := func() (int, int) {
		sh.mu.Lock()
		defer sh.mu.Unlock()
		return len(sh.resources), len(sh.released)
	}
	peaks := func() mapPeaks {
		sh.mu.Lock()
		defer sh.mu.Unlock()
		return sh.peaks
	}

	const n = 4 * minShrinkPeak
	id := func(i int) string { return fmt.Sprintf("sha256:%064x", i) }
	leases := make([]string, n)
	for i := range n {
		resp, err := coord.Lock(ctx, api.LockRequest{Type: api.OperationUpdate, ResourceID: id(i), NodeID: "n1"})
		require.NoError(t, err)
		require.True(t, resp.Acquired)
		leases[i] = resp.LeaseID
	}
	require.Equal(t, n, peaks().resources)
	atPeak := mapOf(resources)

	// All but the last lock are released: n-1 idle keys are forgotten,
	// n-1 released leases remembered.
	for i := range n - 1 {
		_, err := coord.Unlock(ctx, api.UnlockRequest{Type: api.OperationUpdate, ResourceID: id(i), LeaseID: leases[i], Success: true})
		require.NoError(t, err)
	}
	releasedFull := mapOf(released)
	coord.locks.sweep(0, time.Now())
	nres, nrel := lens()
	require.Equal(t, 1, nres)
	require.Equal(t, n-1, nrel)
	require.NotEqual(t, atPeak, mapOf(resources), "the emptied resources map was not rebuilt")
	require.Equal(t, releasedFull, mapOf(released), "a full released map was rebuilt")

	// The rebuilt maps kept their entries: a retried unlock is still
	// answered, and the lock still held can be released.
	resp, err := coord.Unlock(ctx, api.UnlockRequest{Type: api.OperationUpdate, ResourceID: id(0), LeaseID: leases[0], Success: true})
	require.NoError(t, err)
	require.True(t, resp.Released)
	_, err = coord.Unlock(ctx, api.UnlockRequest{Type: api.OperationUpdate, ResourceID: id(n - 1), LeaseID: leases[n-1], Success: true})
	require.NoError(t, err)

	// A lease TTL later every released lease is forgotten, and the
	// released map is rebuilt too.
	coord.locks.sweep(0, time.Now().Add(coord.cfg.LeaseTTL+time.Second))
	nres, nrel = lens()
	require.Zero(t, nres)
	require.Zero(t, nrel)
	require.NotEqual(t, releasedFull, mapOf(released), "the emptied released map was not rebuilt")
	require.Zero(t, peaks().released)
}

func TestShrinkable(t *testing.T) {
	for _, tc := range []struct {
		n, peak int
		want    bool
	}{
		{0, 0, false},
		{0, minShrinkPeak - 1, false}, // small maps are left alone
		{0, minShrinkPeak, true},
		{minShrinkPeak / shrinkFactor, minShrinkPeak, true},
		{minShrinkPeak/shrinkFactor + 1, minShrinkPeak, false},
		{200_000 / shrinkFactor, 200_000, true},
		{100_000, 200_000, false},
	} {
		require.Equal(t, tc.want, shrinkable(tc.n, tc.peak), "%d of peak %d", tc.n, tc.peak)
	}
}
