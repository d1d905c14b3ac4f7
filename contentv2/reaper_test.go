package contentv2

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/sharedcontent/sharedcontent/lockserver/api"
	"github.com/stretchr/testify/require"
)

// reapGrace is the reaper's grace in these tests; files are made older
// than it by setting their times, never by waiting.
const reapGrace = time.Hour

// reapEnv is node-1's store with a reaper (run by the test) on a root
// coordinated by a fakeCluster.
func reapEnv(t *testing.T) (*fakeCluster, *store) {
	c := newFakeCluster(longTTL)
	return c, fakeStore(t, c, t.TempDir(), "node-1", WithReaper(0, reapGrace))
}

// putBlob writes a blob file into the root, as another node's commit
// does, aged age.
func putBlob(t *testing.T, s *store, name string, age time.Duration) digest.Digest {
	t.Helper()
	return writeBlob(t, s.root, name, age)
}

// TestReaperDeletesOnlyWhatThePlanAllows: one pass removes the orphan
// older than the grace, under the reap lock, and keeps a younger orphan
// and a blob another node references.
func TestReaperDeletesOnlyWhatThePlanAllows(t *testing.T) {
	c, s := reapEnv(t)
	old := putBlob(t, s, "old orphan", 2*reapGrace)
	young := putBlob(t, s, "young orphan", 0)
	used := putBlob(t, s, "used", 2*reapGrace)
	c.addRef(used.String(), "node-2")

	rep, err := s.Reap(context.Background())
	require.NoError(t, err)
	require.True(t, rep.Ran)
	require.Equal(t, []digest.Digest{old}, blobDigests(rep.Plan.Orphans), "only the old orphan is planned")
	require.Equal(t, 1, rep.Plan.WaitingOrphans, "the young one waits out the grace")
	require.Equal(t, []digest.Digest{old}, blobDigests(rep.Done.Orphans))
	require.NoFileExists(t, s.blobPath(old))
	require.FileExists(t, s.blobPath(young))
	require.FileExists(t, s.blobPath(used))
	requireReapDeletesUnderTheReapLock(t, c)
}

func blobDigests(bs []ReapBlob) []digest.Digest {
	out := []digest.Digest{}
	for _, b := range bs {
		out = append(out, b.Digest)
	}
	return out
}

// requireReapDeletesUnderTheReapLock checks that every reap delete the
// coordinator granted came while its node held the reap lock, and that
// the reaper released the lock.
func requireReapDeletesUnderTheReapLock(t *testing.T, c *fakeCluster) {
	t.Helper()
	var granted int
	for _, call := range calls(c.recorded(), "Lock") {
		if call.Reap != "" && call.Err == nil {
			granted++
			require.True(t, call.WithReapLock, "reap delete of %s without the reap lock", call.Resource)
		}
	}
	require.Positive(t, granted)
	c.mu.Lock()
	defer c.mu.Unlock()
	require.Nil(t, c.locks[reapKey], "the reap lock is released")
}

// TestReaperWaitsForTheReapLock: while another node holds the reap lock,
// a pass does nothing.
func TestReaperWaitsForTheReapLock(t *testing.T) {
	c, s := reapEnv(t)
	old := putBlob(t, s, "old orphan", 2*reapGrace)
	ctx := context.Background()
	other, err := c.node("node-2").Lock(ctx, api.LockRequest{Type: api.OperationUpdate, ResourceID: api.ReapLockResource, Wait: new(false)})
	require.NoError(t, err)

	rep, err := s.Reap(ctx)
	require.NoError(t, err)
	require.False(t, rep.Ran)
	require.FileExists(t, s.blobPath(old))
	for _, call := range calls(c.recorded(), "Lock") {
		require.False(t, call.Node == "node-1" && call.Type == api.OperationDelete, "no delete asked: %+v", call)
	}

	require.NoError(t, other.Unlock(ctx, true, nil))
	rep, err = s.Reap(ctx)
	require.NoError(t, err)
	require.True(t, rep.Ran)
	require.NoFileExists(t, s.blobPath(old))
}

// TestReaperPlanIsNoPromise: a blob referenced between the plan and its
// delete is refused by the coordinator and kept.
func TestReaperPlanIsNoPromise(t *testing.T) {
	c, s := reapEnv(t)
	old := putBlob(t, s, "old orphan", 2*reapGrace)
	c.setRefuse(func(call fakeCall) error {
		if call.Method == "Lock" && call.Reap == api.ReapOrphan {
			c.addRefLocked(call.Resource, "node-2") // referenced just now
		}
		return nil
	})
	rep, err := s.Reap(context.Background())
	require.NoError(t, err)
	require.Equal(t, []digest.Digest{old}, blobDigests(rep.Plan.Orphans))
	require.Empty(t, rep.Done.Orphans)
	require.FileExists(t, s.blobPath(old))
}

// TestReaperDropsOnlyOwnDanglingReferences: a reference to a missing blob
// was dropped by whichever node held the reap lock, whoever held it. Now
// a node drops only its own (its journal against its root), once it has
// seen the blob missing at two passes a grace apart; another node's
// reference stays, reported in the plan.
func TestReaperDropsOnlyOwnDanglingReferences(t *testing.T) {
	c, s := reapEnv(t)
	ctx := context.Background()
	others := digest.FromString("missing, node-2's").String()
	c.addRef(others, "node-2")
	own := digest.FromString("missing, node-1's")
	require.NoError(t, s.reference(ctx, own, false))
	for i := range 20 { // present: the missing one is a small fraction
		d := putBlob(t, s, fmt.Sprint("present ", i), 0)
		require.NoError(t, s.reference(ctx, d, true))
	}

	rep, err := s.Reap(ctx)
	require.NoError(t, err)
	require.Zero(t, rep.Dangling, "first seen missing now")
	require.Equal(t, []string{"node-1"}, c.nodesOf(own.String()))

	age := func() {
		s.reaper.pass.Lock()
		s.reaper.missing[own] = s.reaper.missing[own].Add(-reapGrace)
		s.reaper.pass.Unlock()
		s.reaper.mem.mu.Lock()
		s.reaper.mem.dangling[others] = s.reaper.mem.dangling[others].Add(-reapGrace)
		s.reaper.mem.mu.Unlock()
	}
	age()
	rep, err = s.Reap(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, rep.Dangling)
	require.Empty(t, c.nodesOf(own.String()), "its own reference went")
	require.False(t, s.journal.has(own), "and its journal entry")
	require.Equal(t, []string{others}, resources(rep.Plan.Dangling), "node-2's is reported")
	require.Equal(t, []string{"node-2"}, c.nodesOf(others), "and stays")
	age()
	rep, err = s.Reap(ctx)
	require.NoError(t, err)
	require.Equal(t, []string{"node-2"}, c.nodesOf(others), "at every pass")
	for _, call := range calls(c.recorded(), "Lock") {
		require.NotEqual(t, api.ReapDangling, call.Reap, "no dangling reap is sent: %+v", call)
	}
}

// TestReaperEmptyViewDropsNothing: a node whose root view is empty (not
// mounted) sees all its blobs missing; it drops none of its references,
// and says so.
func TestReaperEmptyViewDropsNothing(t *testing.T) {
	c, s := reapEnv(t)
	ctx := context.Background()
	var refs []digest.Digest
	for i := range 5 {
		d := digest.FromString(fmt.Sprint("unmounted ", i))
		refs = append(refs, d)
		require.NoError(t, s.reference(ctx, d, false))
	}
	for range 2 {
		rep, err := s.Reap(ctx)
		require.NoError(t, err)
		require.Zero(t, rep.Dangling)
		s.reaper.pass.Lock()
		for d, at := range s.reaper.missing {
			s.reaper.missing[d] = at.Add(-reapGrace)
		}
		s.reaper.pass.Unlock()
	}
	for _, d := range refs {
		require.Equal(t, []string{"node-1"}, c.nodesOf(d.String()), "reference to %s kept", d)
		require.True(t, s.journal.has(d))
	}
	require.Equal(t, 5.0, testutil.ToFloat64(s.metrics.missingBlobs))
}

func resources(rs []ReapRef) []string {
	out := []string{}
	for _, r := range rs {
		out = append(out, r.Resource)
	}
	return out
}

// TestReaperExpiresGoneMembers: a member is expired only once it is absent
// by the coordinator's measure and its marker unchanged by the reaper's,
// both for the node expiry; the expiry is asked under the reap lock.
func TestReaperExpiresGoneMembers(t *testing.T) {
	c, s := reapEnv(t)
	ctx := context.Background()
	const expiry = 24 * time.Hour
	require.NoError(t, WriteNodeMarker(s.root, "node-3"))
	c.mu.Lock()
	c.members["node-3"] = &fakeMember{}
	c.absent["node-3"] = 2 * expiry
	c.expiry = expiry
	c.mu.Unlock()

	rep, err := s.Reap(ctx)
	require.NoError(t, err)
	require.Empty(t, rep.Plan.Expire, "its marker was first seen just now")
	require.Equal(t, []string{"node-3"}, members(rep.Plan.Absent))

	s.reaper.mem.mu.Lock()
	seen := s.reaper.mem.markers["node-3"]
	seen.since = seen.since.Add(-expiry)
	s.reaper.mem.markers["node-3"] = seen
	s.reaper.mem.mu.Unlock()
	rep, err = s.Reap(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, rep.Expired)
	c.mu.Lock()
	expired := c.expired
	c.mu.Unlock()
	require.Equal(t, []string{"node-3"}, expired)
	expires := calls(c.recorded(), "ExpireMember")
	require.Len(t, expires, 2, "reported at the first pass too: the coordinator measures from the first report")
	require.ErrorIs(t, expires[0].Err, api.ErrNotExpired)
	require.NoError(t, expires[1].Err, "asked with the reap lock held")
}

func members(ms []ReapMember) []string {
	out := []string{}
	for _, m := range ms {
		out = append(out, m.Node)
	}
	return out
}

// TestReaperPassesCounted: sharedcontent_reaper_passes_total counts each
// pass by its result, every result present at 0 from the start (an alert
// on its increase sees the first one): ran with the reap lock, skipped
// while another node holds it, failed with the coordinator unreachable,
// paused on a root that is not verified.
func TestReaperPassesCounted(t *testing.T) {
	c, s := reapEnv(t)
	passes := func() map[string]float64 {
		out := map[string]float64{}
		for _, r := range reapResults {
			out[r] = testutil.ToFloat64(s.metrics.reapPasses.WithLabelValues(r))
		}
		return out
	}
	require.Equal(t, 4, testutil.CollectAndCount(s.metrics.reapPasses), "every result is exported before the first pass")
	want := map[string]float64{reapRan: 0, reapSkipped: 0, reapPaused: 0, reapFailed: 0}
	require.Equal(t, want, passes())
	ctx := context.Background()

	rep, err := s.Reap(ctx)
	require.NoError(t, err)
	require.True(t, rep.Ran)
	want[reapRan]++
	require.Equal(t, want, passes())

	other, err := c.node("node-2").Lock(ctx, api.LockRequest{Type: api.OperationUpdate, ResourceID: api.ReapLockResource, Wait: new(false)})
	require.NoError(t, err)
	rep, err = s.Reap(ctx)
	require.NoError(t, err)
	require.False(t, rep.Ran)
	want[reapSkipped]++
	require.Equal(t, want, passes())
	require.NoError(t, other.Unlock(ctx, true, nil))

	c.setDown(true)
	_, err = s.Reap(ctx)
	require.Error(t, err)
	require.NotErrorIs(t, err, ErrRootUnverified)
	want[reapFailed]++
	require.Equal(t, want, passes())
	c.setDown(false)

	s.rootw.mu.Lock()
	s.rootw.probeFn = func(root string, _ rootIdentity, _ bool) error {
		return (&rootWatch{root: root}).unready(rootNotMounted, "is no longer a mount point", "mount it", nil)
	}
	s.rootw.mu.Unlock()
	_, err = s.Reap(ctx)
	require.ErrorIs(t, err, ErrRootUnverified)
	want[reapPaused]++
	require.Equal(t, want, passes())
}
