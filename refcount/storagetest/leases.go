package storagetest

import (
	"testing"

	"github.com/containerd/errdefs"
	"github.com/stretchr/testify/require"

	"github.com/sharedcontent/sharedcontent/refcount"
)

// leases reads every lease record of s.
func leases(t *testing.T, s refcount.Storage) []refcount.LeaseRecord {
	t.Helper()
	ls, err := s.Leases(t.Context())
	require.NoError(t, err)
	return ls
}

// testLeases: lease records are put and read back whole, in resource ID
// and lease ID order; a drop names one lease of a resource and is
// idempotent; a pull's unlock adds its reference and drops its record in
// one batch; a record without a lease ID is refused.
func testLeases(t *testing.T, s refcount.Storage) {
	ctx := t.Context()
	require.Empty(t, leases(t, s))
	pullB := refcount.LeaseRecord{ResourceID: "sha256:b", Type: "pull", Node: "n1", RequestID: "q1", LeaseID: "l2", Fence: 4097}
	pullB2 := refcount.LeaseRecord{ResourceID: "sha256:b", Type: "update", Node: "n2", RequestID: "q2", LeaseID: "l1", Fence: 4098}
	pullA := refcount.LeaseRecord{ResourceID: "sha256:a", Type: "pull", Node: "n3", RequestID: "q3", LeaseID: "l9", Fence: 12}
	commit(t, s, new(refcount.Batch).PutLease(pullB).PutLease(pullB2).Break().PutLease(pullA))
	require.Equal(t, []refcount.LeaseRecord{pullA, pullB2, pullB}, leases(t, s))

	// The pull of b succeeds: its reference and the drop of its record
	// in one batch; the other lease of b stays.
	commit(t, s, new(refcount.Batch).AddRef("sha256:b", "n1").DropLease("sha256:b", "l2"))
	require.Equal(t, []refcount.LeaseRecord{pullA, pullB2}, leases(t, s))
	ids, nodes := list(t, s)
	require.Equal(t, []string{"sha256:b"}, ids)
	require.Equal(t, [][]string{{"n1"}}, nodes)

	// Dropping again, or a lease never recorded, is no error.
	commit(t, s, new(refcount.Batch).DropLease("sha256:b", "l2").DropLease("sha256:c", "l7"))
	require.Equal(t, []refcount.LeaseRecord{pullA, pullB2}, leases(t, s))
	// A put then a drop in one batch: the drop wins.
	commit(t, s, new(refcount.Batch).PutLease(refcount.LeaseRecord{ResourceID: "sha256:c", Type: "pull", Node: "n", LeaseID: "l3"}).DropLease("sha256:c", "l3"))
	require.Equal(t, []refcount.LeaseRecord{pullA, pullB2}, leases(t, s))

	// Bad writes change nothing, wherever they are in the batch.
	for _, bad := range []*refcount.Batch{
		new(refcount.Batch).DropLease("sha256:a", "l9").PutLease(refcount.LeaseRecord{ResourceID: "sha256:d", Type: "pull"}),
		new(refcount.Batch).PutLease(refcount.LeaseRecord{LeaseID: "l4", Type: "pull"}).DropLease("sha256:a", "l9"),
		new(refcount.Batch).DropLease("sha256:a", "l9").DropLease("sha256:a", ""),
		new(refcount.Batch).DropLease("sha256:a", "l9").DropLease("", "l9"),
		new(refcount.Batch).DropLease("sha256:a", "l9").PutLease(refcount.LeaseRecord{ResourceID: "sha256:e", LeaseID: "l\x00x"}),
	} {
		require.ErrorIs(t, s.Commit(ctx, bad), errdefs.ErrInvalidArgument)
	}
	require.Equal(t, []refcount.LeaseRecord{pullA, pullB2}, leases(t, s))

	commit(t, s, new(refcount.Batch).DropLease("sha256:a", "l9").DropLease("sha256:b", "l1"))
	require.Empty(t, leases(t, s))
}
