package lockserver

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sharedcontent/sharedcontent/lockserver/api"
)

// TestLineageOwnsNodeID (docs/design.md §8.5): a node ID belongs to the
// host whose journal generation first opened its session. Another host
// (a clone: another generation) is refused while the host is cut off and
// once the clash has ended, and its GC drops none of the ID's references;
// the host itself, restarted after a crash (a new instance, its own
// generation), takes its ID back without an operator. A session that
// leaves out the instance and generation is refused and clears nothing.
// The lineage survives a coordinator restart. An operator's release lets
// the next host in, with the ID's references kept (a live member is not
// released).
//
// Before: the clone opened a session as soon as the host's had lapsed,
// and its GC's deletes dropped the host's references.
func TestLineageOwnsNodeID(t *testing.T) {
	dir := t.TempDir()
	ttl := 3 * time.Second
	withTTL := func(c *Config) { c.SessionTTL = ttl }
	ts := startStored(t, dir, withTTL)
	coord := ts.Coordinator
	clock := useFakeClock(coord)
	ctx := context.Background()
	host := func(instance, gen string) api.SessionRequest {
		return api.SessionRequest{NodeID: "host", InstanceID: instance, Generation: gen}
	}
	a, err := coord.Session(ctx, host("i1", "g-host"))
	require.NoError(t, err)
	_, err = coord.SyncRefs(ctx, "host", api.SyncRequest{SyncID: "s1", Generation: "g-host", ResourceIDs: []string{blob}, Done: true, Echo: echo(a, 0)})
	require.NoError(t, err)

	clock.at(ttl + time.Second) // the host is cut off: its session lapsed
	requireClone := func(coord *Coordinator, why string) {
		t.Helper()
		_, err := coord.Session(ctx, host("clone", "g-clone"))
		require.ErrorIs(t, err, api.ErrDuplicateNode, why)
		require.ErrorContains(t, err, "sharedcontentctl node release host", why)
		_, err = coord.Lock(ctx, api.LockRequest{Type: api.OperationDelete, ResourceID: blob, NodeID: "host", RequestID: "gc-" + why})
		require.Error(t, err, "%s: the ID's GC drops nothing", why)
		require.Equal(t, []string{"host"}, refsOf(t, coord, blob), why)
	}
	requireClone(coord, "the host is cut off")
	clock.at(3*ttl + time.Second)
	requireClone(coord, "the clash has ended")

	_, err = coord.Session(ctx, api.SessionRequest{NodeID: "host"})
	require.ErrorIs(t, err, api.ErrInvalidArgument, "a session without instance and generation")
	_, err = coord.Session(ctx, host("i1", ""))
	require.ErrorIs(t, err, api.ErrInvalidArgument, "a session without a generation")
	requireClone(coord, "a session without instance and generation cleared nothing")

	clock.at(5 * ttl)
	a, err = coord.Session(ctx, host("i2", "g-host"))
	require.NoError(t, err, "the host restarted after a crash: a new instance, its own generation")
	_, err = coord.SyncRefs(ctx, "host", api.SyncRequest{SyncID: "s2", Generation: "g-host", ResourceIDs: []string{blob}, Done: true, Echo: echo(a, 0)})
	require.NoError(t, err)
	_, err = coord.Release(ctx, "host")
	require.ErrorIs(t, err, api.ErrMemberLive, "a live member is not released")

	ts.Stop()
	ts = startStored(t, dir, withTTL)
	coord = ts.Coordinator
	clock = useFakeClock(coord)
	requireClone(coord, "after a coordinator restart")
	_, err = coord.Session(ctx, api.SessionRequest{NodeID: "host"})
	require.ErrorIs(t, err, api.ErrInvalidArgument, "after a coordinator restart too")

	rel, err := coord.Release(ctx, "host")
	require.NoError(t, err)
	require.Equal(t, "g-host", rel.Lineage)
	_, err = coord.Release(ctx, "nobody")
	require.ErrorIs(t, err, api.ErrNotFound)
	clock.at(ttl + time.Second) // the clone's last refusal is a TTL old
	a, err = coord.Session(ctx, host("clone", "g-clone"))
	require.NoError(t, err, "released: the next host takes the ID over")
	_, err = coord.SyncRefs(ctx, "host", api.SyncRequest{SyncID: "s3", Generation: "g-clone", Done: true, Echo: echo(a, 0)})
	require.NoError(t, err)
	require.Equal(t, []string{"host"}, refsOf(t, coord, blob), "with the ID's references (a new generation only adds)")
	clock.at(3*ttl + time.Second)
	_, err = coord.Session(ctx, host("i3", "g-host"))
	require.ErrorIs(t, err, api.ErrDuplicateNode, "the ID is the new host's now")
}
