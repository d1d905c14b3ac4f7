package storagetest

import (
	"testing"
	"time"

	"github.com/containerd/errdefs"
	"github.com/stretchr/testify/require"

	"github.com/sharedcontent/sharedcontent/refcount"
)

// pins reads every pin record of s.
func pins(t *testing.T, s refcount.Storage) []refcount.PinRecord {
	t.Helper()
	ps, err := s.Pins(t.Context())
	require.NoError(t, err)
	return ps
}

// testPins: a pin's record and its references are written in one batch
// and read back whole, in name order; a put replaces the record of its
// name; a drop is idempotent; what the caller changes after the put is
// not stored; bad writes change nothing (docs/design.md §8.21).
func testPins(t *testing.T, s refcount.Storage) {
	ctx := t.Context()
	require.Empty(t, pins(t, s))
	created := time.Date(2026, 12, 2, 3, 0, 0, 0, time.UTC)
	expires := created.Add(24 * time.Hour)
	web := refcount.PinRecord{Name: "web", Image: "example.com/web:1", ResourceIDs: []string{"sha256:a", "sha256:b"},
		Created: created, Expires: &expires, By: "admin"}
	base := refcount.PinRecord{Name: "base", ResourceIDs: []string{"sha256:b"}, Created: created, By: "admin"}
	b := new(refcount.Batch).AddRef("sha256:a", "pin/web").AddRef("sha256:b", "pin/web").PutPin(web).Break().
		AddRef("sha256:b", "pin/base").PutPin(base)
	// What the caller changes after the put is not stored.
	web.ResourceIDs[0] = "sha256:changed"
	later := expires.Add(time.Hour)
	web.Expires = &later
	commit(t, s, b)
	web.ResourceIDs[0], web.Expires = "sha256:a", &expires
	require.Equal(t, []refcount.PinRecord{base, web}, pins(t, s))
	ids, nodes := list(t, s)
	require.Equal(t, []string{"sha256:a", "sha256:b"}, ids)
	require.Equal(t, [][]string{{"pin/web"}, {"pin/base", "pin/web"}}, nodes)

	// What a read returns is a copy.
	got := pins(t, s)
	got[1].ResourceIDs[0] = "sha256:x"
	*got[1].Expires = later
	require.Equal(t, []refcount.PinRecord{base, web}, pins(t, s))

	// A put replaces the record of its name.
	web2 := refcount.PinRecord{Name: "web", ResourceIDs: []string{"sha256:c"}, Created: created.Add(time.Minute), By: "ops"}
	commit(t, s, new(refcount.Batch).AddRef("sha256:c", "pin/web").RemoveRef("sha256:a", "pin/web").RemoveRef("sha256:b", "pin/web").PutPin(web2))
	require.Equal(t, []refcount.PinRecord{base, web2}, pins(t, s))

	// Bad writes change nothing, wherever they are in the batch.
	for _, bad := range []*refcount.Batch{
		new(refcount.Batch).DropPin("base").PutPin(refcount.PinRecord{Name: "", ResourceIDs: []string{"sha256:d"}}),
		new(refcount.Batch).DropPin("base").PutPin(refcount.PinRecord{Name: "x\x00y", ResourceIDs: []string{"sha256:d"}}),
		new(refcount.Batch).DropPin("base").PutPin(refcount.PinRecord{Name: "z", ResourceIDs: []string{""}}),
		new(refcount.Batch).PutPin(refcount.PinRecord{Name: "z", ResourceIDs: []string{"sha256:\x00"}}).DropPin("base"),
		new(refcount.Batch).DropPin("base").DropPin(""),
	} {
		require.ErrorIs(t, s.Commit(ctx, bad), errdefs.ErrInvalidArgument)
	}
	require.Equal(t, []refcount.PinRecord{base, web2}, pins(t, s))

	// A drop, with the pin's references; again, or of a pin never
	// recorded, is no error.
	commit(t, s, new(refcount.Batch).RemoveRef("sha256:b", "pin/base").DropPin("base"))
	commit(t, s, new(refcount.Batch).DropPin("base").DropPin("never"))
	require.Equal(t, []refcount.PinRecord{web2}, pins(t, s))
	ids, nodes = list(t, s)
	require.Equal(t, []string{"sha256:c"}, ids)
	require.Equal(t, [][]string{{"pin/web"}}, nodes)
}

// testPinsTakeOver: the pins a handle recorded are the next owner's (a
// restart, a new leader), and the old handle can no longer change them.
func testPinsTakeOver(t *testing.T, s refcount.Storage, takeOver func(t *testing.T, s refcount.Storage) refcount.Storage) {
	p := refcount.PinRecord{Name: "keep", ResourceIDs: []string{"sha256:a"}, Created: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
	commit(t, s, new(refcount.Batch).AddRef("sha256:a", "pin/keep").PutPin(p))
	n := takeOver(t, s)
	require.Equal(t, []refcount.PinRecord{p}, pins(t, n))
	require.ErrorIs(t, s.Commit(t.Context(), new(refcount.Batch).DropPin("keep")), refcount.ErrFenced)
	require.Equal(t, []refcount.PinRecord{p}, pins(t, n))
}
