package lockserver

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/sharedcontent/sharedcontent/lockserver/api"
)

// Pins (docs/design.md §8.21): held references of an operator-named
// holder that the delete rule and the reaper obey as a node's.

// pinDigest returns a well-formed blob digest ending in s.
func pinDigest(s string) string {
	return "sha256:" + strings.Repeat("0", 64-len(s)) + s
}

var (
	pinA = pinDigest("a")
	pinB = pinDigest("b")
	pinC = pinDigest("c")
)

func putPin(t *testing.T, c *Coordinator, name string, ids ...string) api.Pin {
	t.Helper()
	p, err := c.PutPin(context.Background(), name, api.Pin{Image: "example.com/" + name, ResourceIDs: ids}, "admin token")
	require.NoError(t, err)
	return p
}

func pinNames(t *testing.T, c *Coordinator) []string {
	t.Helper()
	ps, err := c.Pins(context.Background())
	require.NoError(t, err)
	var out []string
	for _, p := range ps.Pins {
		out = append(out, p.Name+"="+strings.Join(p.ResourceIDs, ","))
	}
	return out
}

// TestPinRefusesDeleteAndReap: a node's own delete of a pinned blob is
// refused (409 in_use naming the pin), and so is every reap delete of it,
// orphan or dangling; a node's sync does not drop the pin's reference.
// Once the pin is deleted, the reaper may take the blob.
func TestPinRefusesDeleteAndReap(t *testing.T) {
	c := newTestCoordinator(t, func(c *Config) { c.ReapGrace = 0 })
	ctx := context.Background()
	for _, n := range []string{"a", "reaper"} {
		session(t, c, n)
		syncRefs(t, c, n, "s-"+n, true)
	}
	_, err := c.AddRef(ctx, pinA, "a")
	require.NoError(t, err)
	p := putPin(t, c, "web", pinB, pinA, pinA)
	require.Equal(t, []string{pinA, pinB}, p.ResourceIDs, "sorted, without duplicates")
	require.Equal(t, "admin token", p.By)
	require.Equal(t, []string{"a", "pin/web"}, refsOf(t, c, pinA))
	require.Equal(t, []string{"pin/web"}, refsOf(t, c, pinB))
	require.Equal(t, 1.0, testutil.ToFloat64(c.references.pins.pins))
	require.Equal(t, 2.0, testutil.ToFloat64(c.references.pins.blobs))

	// The node's own delete: its reference goes, the pin's refuses it.
	_, err = c.Lock(ctx, api.LockRequest{Type: api.OperationDelete, ResourceID: pinA, NodeID: "a", Wait: new(false)})
	require.ErrorIs(t, err, api.ErrInUse)
	require.ErrorContains(t, err, "pin/web")
	require.Equal(t, []string{"pin/web"}, refsOf(t, c, pinA))

	// A sync of the node replaces its own references, never the pin's.
	syncRefs(t, c, "a", "s-a2", true)
	require.Equal(t, []string{"pin/web"}, refsOf(t, c, pinA))

	// The reaper: neither an orphan nor a dangling reap of a pinned blob.
	_, err = c.Lock(ctx, api.LockRequest{Type: api.OperationUpdate, ResourceID: api.ReapLockResource, NodeID: "reaper", Wait: new(false)})
	require.NoError(t, err)
	for _, mode := range []api.ReapMode{api.ReapOrphan, api.ReapDangling} {
		for _, id := range []string{pinA, pinB} {
			_, err = c.Lock(ctx, api.LockRequest{Type: api.OperationDelete, ResourceID: id, NodeID: "reaper", Reap: mode, Wait: new(false)})
			require.ErrorIs(t, err, api.ErrInUse, "%s reap of pinned %s", mode, id)
		}
	}

	// The pin goes: so do its references, and the reaper may reap.
	require.NoError(t, c.DeletePin(ctx, "web"))
	require.Empty(t, refsOf(t, c, pinB))
	require.Empty(t, pinNames(t, c))
	require.Equal(t, 0.0, testutil.ToFloat64(c.references.pins.pins))
	reap, err := c.Lock(ctx, api.LockRequest{Type: api.OperationDelete, ResourceID: pinB, NodeID: "reaper", Reap: api.ReapOrphan, Wait: new(false)})
	require.NoError(t, err)
	require.True(t, reap.Acquired)
	require.ErrorIs(t, c.DeletePin(ctx, "web"), api.ErrNotFound)
}

// TestPinReplace: a put of an existing name replaces its blobs: the
// references of the blobs it no longer holds go, in the same batch.
func TestPinReplace(t *testing.T) {
	c := newTestCoordinator(t)
	putPin(t, c, "web", pinA, pinB)
	putPin(t, c, "base", pinB)
	putPin(t, c, "web", pinB, pinC)
	require.Empty(t, refsOf(t, c, pinA))
	require.Equal(t, []string{"pin/base", "pin/web"}, refsOf(t, c, pinB))
	require.Equal(t, []string{"pin/web"}, refsOf(t, c, pinC))
	require.Equal(t, []string{"base=" + pinB, "web=" + pinB + "," + pinC}, pinNames(t, c))
	got, err := c.Pin(context.Background(), "web")
	require.NoError(t, err)
	require.Equal(t, "example.com/web", got.Image)
	require.Equal(t, 3.0-1, testutil.ToFloat64(c.references.pins.pins))
	require.Equal(t, 2.0, testutil.ToFloat64(c.references.pins.blobs))
}

// TestPinSurvivesRestart: a pin is durable (bbolt): the coordinator that
// starts next on the database has it, its references refuse deletes,
// and its expiry is kept.
func TestPinSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	c := startStored(t, dir)
	expires := time.Now().Add(time.Hour).UTC().Truncate(time.Second)
	want, err := c.PutPin(context.Background(), "web", api.Pin{Image: "example.com/web:1", ResourceIDs: []string{pinA, pinB}, Expires: &expires}, "admin token")
	require.NoError(t, err)
	c.Stop()

	c = startStored(t, dir)
	ps, err := c.Pins(context.Background())
	require.NoError(t, err)
	require.Len(t, ps.Pins, 1)
	got := ps.Pins[0]
	require.True(t, want.Created.Equal(got.Created))
	require.True(t, expires.Equal(*got.Expires))
	got.Created, got.Expires, want.Created, want.Expires = time.Time{}, nil, time.Time{}, nil
	require.Equal(t, want, got)
	require.Equal(t, []string{"pin/web"}, refsOf(t, c.Coordinator, pinA))
	members(t, c.Coordinator, "a")
	_, err = c.Lock(context.Background(), api.LockRequest{Type: api.OperationDelete, ResourceID: pinB, NodeID: "a", Wait: new(false)})
	require.ErrorIs(t, err, api.ErrInUse)
	require.Equal(t, 1.0, testutil.ToFloat64(c.references.pins.pins))
}

// TestPinExpiry: the coordinator's sweep drops a pin once its Expires has
// passed, with its references; not before.
func TestPinExpiry(t *testing.T) {
	c := newTestCoordinator(t)
	clock := useFakeClock(c)
	ctx := context.Background()
	expires := c.now().Add(time.Hour)
	_, err := c.PutPin(ctx, "web", api.Pin{ResourceIDs: []string{pinA}, Expires: &expires}, "admin token")
	require.NoError(t, err)
	putPin(t, c, "forever", pinB)

	clock.at(time.Hour - time.Millisecond)
	c.references.expirePins(ctx, c.now())
	require.Equal(t, []string{"forever=" + pinB, "web=" + pinA}, pinNames(t, c))
	require.Equal(t, []string{"pin/web"}, refsOf(t, c, pinA))

	clock.at(time.Hour)
	c.references.expirePins(ctx, c.now())
	require.Equal(t, []string{"forever=" + pinB}, pinNames(t, c))
	require.Empty(t, refsOf(t, c, pinA))
	require.Equal(t, []string{"pin/forever"}, refsOf(t, c, pinB))
}

// TestPinBadInputChangesNothing: a bad name, a body naming another pin, no
// blob or too many, a resource ID that is no digest, an expiry that has
// passed: each is refused as an invalid argument naming the fault, and
// nothing changes. A node may not take a pin's holder ID.
func TestPinBadInputChangesNothing(t *testing.T) {
	c := newTestCoordinator(t)
	ctx := context.Background()
	putPin(t, c, "web", pinA)
	past := c.now().Add(-time.Second)
	many := make([]string, api.MaxPinBlobs+1)
	for i := range many {
		many[i] = pinB
	}
	for _, tc := range []struct {
		name, want string
		pin        api.Pin
	}{
		{"", "must be 1 to", api.Pin{ResourceIDs: []string{pinB}}},
		{"-web", "starting with a letter", api.Pin{ResourceIDs: []string{pinB}}},
		{"we/b", "only letters", api.Pin{ResourceIDs: []string{pinB}}},
		{strings.Repeat("w", api.MaxPinNameLen+1), "must be 1 to", api.Pin{ResourceIDs: []string{pinB}}},
		{"web", `names pin "other"`, api.Pin{Name: "other", ResourceIDs: []string{pinB}}},
		{"web", "0 resource IDs", api.Pin{}},
		{"web", "10001 resource IDs", api.Pin{ResourceIDs: many}},
		{"web", `"sha256:zz" is not a blob digest`, api.Pin{ResourceIDs: []string{pinB, "sha256:zz"}}},
		{"web", "which has passed", api.Pin{ResourceIDs: []string{pinB}, Expires: &past}},
		{"web", "control character", api.Pin{Image: "a\x01", ResourceIDs: []string{pinB}}},
	} {
		_, err := c.PutPin(ctx, tc.name, tc.pin, "admin token")
		require.ErrorIs(t, err, api.ErrInvalidArgument, "pin %q", tc.name)
		require.ErrorContains(t, err, tc.want)
	}
	require.Equal(t, []string{"web=" + pinA}, pinNames(t, c))
	require.Equal(t, []string{"pin/web"}, refsOf(t, c, pinA))
	require.Empty(t, refsOf(t, c, pinB))
	_, err := c.Pin(ctx, "nope")
	require.ErrorIs(t, err, api.ErrNotFound)
	require.ErrorIs(t, c.DeletePin(ctx, "a/b"), api.ErrInvalidArgument)

	// A pin's holder is no node: no session, no forget.
	_, err = c.Session(ctx, api.SessionRequest{NodeID: "pin/web"})
	require.ErrorIs(t, err, api.ErrInvalidArgument)
	require.ErrorContains(t, err, "sharedcontentctl pin rm web")
	require.ErrorIs(t, c.Forget(ctx, "pin/web"), api.ErrInvalidArgument)
	require.Equal(t, []string{"pin/web"}, refsOf(t, c, pinA))
}

// TestPinRefusedForDeletedBlob: a blob whose delete completed (and that
// nobody pulled since) may be gone: pinning it is refused (409 deleting,
// naming it), and nothing of the pin is recorded.
func TestPinRefusedForDeletedBlob(t *testing.T) {
	c := newTestCoordinator(t)
	ctx := context.Background()
	members(t, c, "a")
	d, err := c.Lock(ctx, api.LockRequest{Type: api.OperationDelete, ResourceID: pinB, NodeID: "a", Wait: new(false)})
	require.NoError(t, err)
	require.True(t, d.Acquired)
	// In flight.
	_, err = c.PutPin(ctx, "web", api.Pin{ResourceIDs: []string{pinA, pinB}}, "admin token")
	require.ErrorIs(t, err, api.ErrDeleting)
	require.ErrorContains(t, err, pinB)
	_, err = c.Unlock(ctx, api.UnlockRequest{Type: api.OperationDelete, ResourceID: pinB, LeaseID: d.LeaseID, NodeID: "a", Success: true})
	require.NoError(t, err)
	// Completed.
	_, err = c.PutPin(ctx, "web", api.Pin{ResourceIDs: []string{pinA, pinB}}, "admin token")
	require.ErrorIs(t, err, api.ErrDeleting)
	require.ErrorContains(t, err, "was deleted by node a")
	require.Empty(t, pinNames(t, c))
	require.Empty(t, refsOf(t, c, pinA))
	require.Empty(t, refsOf(t, c, pinB))
	// Pulled again: it may be pinned.
	_, err = c.AddRef(ctx, pinB, "a")
	require.NoError(t, err)
	putPin(t, c, "web", pinA, pinB)
	require.Equal(t, []string{"a", "pin/web"}, refsOf(t, c, pinB))
}

// TestPinDropWaitsTheReapGrace: dropping a pin is a reference change of
// its blobs: a reap delete is refused within the reap grace after it, and
// granted after.
func TestPinDropWaitsTheReapGrace(t *testing.T) {
	const grace = time.Hour
	c := newTestCoordinator(t, func(c *Config) {
		c.ReapGrace = grace
		c.SessionTTL, c.LeaseTTL, c.ClaimTimeout, c.NodeExpiry, c.MaxReapHold = 24*grace, 24*grace, 24*grace, 48*grace, 48*grace
	})
	clock := useFakeClock(c)
	ctx := context.Background()
	members(t, c, "reaper")
	putPin(t, c, "web", pinB)
	clock.at(2 * grace)
	_, err := c.Lock(ctx, api.LockRequest{Type: api.OperationUpdate, ResourceID: api.ReapLockResource, NodeID: "reaper", Wait: new(false)})
	require.NoError(t, err)
	reap := func() (api.LockResponse, error) {
		return c.Lock(ctx, api.LockRequest{Type: api.OperationDelete, ResourceID: pinB, NodeID: "reaper", Reap: api.ReapOrphan, Wait: new(false)})
	}
	_, err = reap()
	require.ErrorIs(t, err, api.ErrInUse, "pinned")
	require.NoError(t, c.DeletePin(ctx, "web"))
	_, err = reap()
	require.ErrorIs(t, err, api.ErrInUse)
	require.ErrorContains(t, err, "within the coordinator's reap grace")
	clock.at(3*grace + time.Millisecond)
	got, err := reap()
	require.NoError(t, err)
	require.True(t, got.Acquired)
}
