package remote_test

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"
	"github.com/stretchr/testify/require"

	"github.com/sharedcontent/sharedcontent/contentv2"
	"github.com/sharedcontent/sharedcontent/lockserver/api"
)

// lapsingLocks is a coordinator whose delete leases end as failures
// (the coordinator releases them, as a lapse or a fenced leader does)
// right before the deleter's unlock(success) arrives: the real
// coordinator then refuses that unlock (not the holder).
type lapsingLocks struct{ contentv2.Coordinator }

func (c lapsingLocks) Lock(ctx context.Context, req api.LockRequest) (contentv2.Lock, error) {
	lk, err := c.Coordinator.Lock(ctx, req)
	if err != nil || req.Type != api.OperationDelete {
		return lk, err
	}
	return lapsingLock{lk}, nil
}

type lapsingLock struct{ contentv2.Lock }

func (l lapsingLock) Unlock(ctx context.Context, success bool, cause error) error {
	if err := l.Lock.Unlock(ctx, false, nil); err != nil {
		return err
	}
	return l.Lock.Unlock(ctx, success, cause)
}

// trashStore is node-1's store on root, with a reaper run by the test,
// through coord.
func trashStore(t *testing.T, root string, coord contentv2.Coordinator) contentv2.Store {
	t.Helper()
	s, err := contentv2.NewStore(root, "node-1", coord, contentv2.WithStateDir(t.TempDir()),
		contentv2.WithSessionTTL(sessionTTL), contentv2.WithReaper(0, time.Hour))
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	return s
}

func blobFile(root string, d digest.Digest) string {
	return filepath.Join(root, "blobs", d.Algorithm().String(), d.Encoded())
}

func putFile(t *testing.T, path, content string, age time.Duration) {
	t.Helper()
	require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
	require.NoError(t, os.WriteFile(path, []byte(content), 0o644))
	at := time.Now().Add(-age)
	require.NoError(t, os.Chtimes(path, at, at))
}

// TestDeleteRefusedByTheCoordinatorPutsTheBlobBack: against a real
// coordinator, a delete whose unlock(success) is refused (its lease ended
// first) leaves the blob in place and readable, and no completion.
func TestDeleteRefusedByTheCoordinatorPutsTheBlobBack(t *testing.T) {
	coord := start(t)
	root := t.TempDir()
	s := trashStore(t, root, lapsingLocks{node(t, coord, "node-1")})
	d := digest.FromString("kept")
	putFile(t, blobFile(root, d), "kept", 0)

	require.NoError(t, s.Delete(context.Background(), d))
	b, err := os.ReadFile(blobFile(root, d))
	require.NoError(t, err, "the blob is back in place")
	require.Equal(t, "kept", string(b))
	es, _ := os.ReadDir(filepath.Join(root, contentv2.TrashDir))
	require.Empty(t, es)
	dc, err := node(t, coord, "node-2").DeleteCompletion(context.Background(), d)
	require.NoError(t, err)
	require.False(t, dc.Done, "no completion: the delete did not succeed")
}

// TestReaperSettlesTrashByTheCoordinatorsCompletion: against a real
// coordinator, the completion of a successful delete carries its fence
// (GET /lock/status), and the reaper unlinks a trash entry with that
// fence, and restores one of a later delete that never completed (a
// deleter that crashed between its rename and its unlock).
func TestReaperSettlesTrashByTheCoordinatorsCompletion(t *testing.T) {
	coord := start(t)
	root := t.TempDir()
	var fence uint64
	fenceOf := fenceRecorder{Coordinator: node(t, coord, "node-1"), fence: &fence}
	s := trashStore(t, root, fenceOf)
	ctx := context.Background()

	d := digest.FromString("deleted")
	putFile(t, blobFile(root, d), "deleted", 0)
	require.NoError(t, s.Delete(ctx, d))
	require.NoFileExists(t, blobFile(root, d))
	require.NotZero(t, fence)
	dc, err := node(t, coord, "node-2").DeleteCompletion(ctx, d)
	require.NoError(t, err)
	require.Equal(t, contentv2.DeleteCompletion{Done: true, Fence: fence}, dc)

	// Two entries a crashed deleter could have left: one of the delete
	// that succeeded, one of a later delete (fence+1) without a
	// completion.
	trash := filepath.Join(root, contentv2.TrashDir)
	done := filepath.Join(trash, d.Encoded()+".sha256."+strconv.FormatUint(fence, 10)+".0123456789ab")
	crashed := filepath.Join(trash, d.Encoded()+".sha256."+strconv.FormatUint(fence+1, 10)+".0123456789ac")
	putFile(t, done, "deleted", 2*time.Hour)
	putFile(t, crashed, "deleted", 2*time.Hour)
	rep, err := s.Reap(ctx)
	require.NoError(t, err)
	require.True(t, rep.Ran)
	require.Equal(t, 1, rep.Trash, "the entry of the successful delete is unlinked")
	require.Equal(t, 1, rep.TrashRestored, "the crashed deleter's entry is restored")
	b, err := os.ReadFile(blobFile(root, d))
	require.NoError(t, err)
	require.Equal(t, "deleted", string(b))
	es, _ := os.ReadDir(trash)
	require.Empty(t, es)
}

// fenceRecorder records the fence of the delete leases it hands out.
type fenceRecorder struct {
	contentv2.Coordinator
	fence *uint64
}

func (c fenceRecorder) Lock(ctx context.Context, req api.LockRequest) (contentv2.Lock, error) {
	lk, err := c.Coordinator.Lock(ctx, req)
	if err == nil && req.Type == api.OperationDelete {
		*c.fence = lk.Fence()
	}
	return lk, err
}
