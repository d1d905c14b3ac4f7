package contentv2

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"
	"github.com/sharedcontent/sharedcontent/lockserver/api"
	"github.com/stretchr/testify/require"
)

// trashEntries lists the names in s's trash.
func trashEntries(t *testing.T, s *store) []string {
	t.Helper()
	es, err := os.ReadDir(filepath.Join(s.root, TrashDir))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	require.NoError(t, err)
	var names []string
	for _, e := range es {
		names = append(names, e.Name())
	}
	return names
}

// refuseDeleteUnlock makes c answer every delete's unlock with err, after
// running meanwhile (when set) as if it happened while the blob is in the
// trash. The lock stays held, as after a coordinator that did not act.
func refuseDeleteUnlock(c *fakeCluster, err error, meanwhile func()) {
	c.setRefuse(func(call fakeCall) error {
		if call.Method == "Unlock" && call.Type == api.OperationDelete {
			if meanwhile != nil {
				meanwhile()
			}
			return err
		}
		return nil
	})
}

// TestDeleteNotConfirmedPutsTheBlobBack: the deleter unlinks its trash
// entry only once the coordinator has answered its unlock(success); a
// refusal (a deposed leader's fenced commit), an unreachable coordinator
// or a time-out puts the blob back, readable, and leaves no trash.
func TestDeleteNotConfirmedPutsTheBlobBack(t *testing.T) {
	for name, uerr := range map[string]error{
		"refused":     errors.New("fake: not_leader: the commit was fenced"),
		"unreachable": errFakeDown,
		"timed out":   fmt.Errorf("unlock: %w", context.DeadlineExceeded),
	} {
		t.Run(name, func(t *testing.T) {
			c, s := reapEnv(t)
			d := putBlob(t, s, "blob "+name, 0)
			refuseDeleteUnlock(c, uerr, func() {
				require.NoFileExists(t, s.blobPath(d), "the blob is in the trash while the unlock is out")
			})
			require.NoError(t, s.Delete(context.Background(), d))
			b, err := os.ReadFile(s.blobPath(d))
			require.NoError(t, err, "the blob is back in place")
			require.Equal(t, "blob "+name, string(b))
			require.Empty(t, trashEntries(t, s))
			require.Len(t, calls(c.recorded(), "Unlock"), 1, "the unlock was tried")
		})
	}
}

// TestDeleteConfirmedUnlinks: a confirmed unlock removes the blob and
// leaves no trash.
func TestDeleteConfirmedUnlinks(t *testing.T) {
	c, s := reapEnv(t)
	d := putBlob(t, s, "gone", 0)
	require.NoError(t, s.Delete(context.Background(), d))
	require.NoFileExists(t, s.blobPath(d))
	require.Empty(t, trashEntries(t, s))
	dc, err := c.node("node-2").DeleteCompletion(context.Background(), d)
	require.NoError(t, err)
	require.True(t, dc.Done)
}

// TestDeleteNotConfirmedKeepsABlobCommittedMeanwhile: a pull that commits
// the same digest while the blob is in the trash keeps its file (the
// deleter does not rename over it: same content, so the trash copy is
// only unlinked), and nothing is lost.
func TestDeleteNotConfirmedKeepsABlobCommittedMeanwhile(t *testing.T) {
	c, s := reapEnv(t)
	d := putBlob(t, s, "same", 0)
	var committed os.FileInfo
	refuseDeleteUnlock(c, errFakeDown, func() {
		require.NoError(t, os.WriteFile(s.blobPath(d), []byte("same"), 0o644))
		fi, err := os.Stat(s.blobPath(d))
		require.NoError(t, err)
		committed = fi
	})
	require.NoError(t, s.Delete(context.Background(), d))
	fi, err := os.Stat(s.blobPath(d))
	require.NoError(t, err)
	require.True(t, os.SameFile(committed, fi), "the blob committed meanwhile is the one in place")
	b, err := os.ReadFile(s.blobPath(d))
	require.NoError(t, err)
	require.Equal(t, "same", string(b))
	require.Empty(t, trashEntries(t, s))
}

// putTrash writes a trash entry of dgst with fence, as a deleter that
// crashed after its rename leaves it, older than the grace.
func putTrash(t *testing.T, s *store, content string, fence uint64) (digest.Digest, string) {
	t.Helper()
	d := digest.FromString(content)
	p := filepath.Join(s.root, TrashDir, trashName(d, fence))
	require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
	require.NoError(t, os.WriteFile(p, []byte(content), 0o644))
	at := time.Now().Add(-2 * reapGrace)
	require.NoError(t, os.Chtimes(p, at, at))
	return d, p
}

// TestReaperSettlesTrash: the reaper unlinks a trash entry only when the
// coordinator holds a successful completion of its delete (its fence or
// a later one) and restores it otherwise: a deleter that crashed between
// its rename and its unlock, a delete that lapsed, a completion of an
// earlier delete, an older node's entry that carries no fence.
func TestReaperSettlesTrash(t *testing.T) {
	for _, tc := range []struct {
		name       string
		completion *DeleteCompletion
		fence      uint64
		legacy     bool
		restored   bool
	}{
		{name: "no completion (crash before the unlock)", fence: 7, restored: true},
		{name: "successful completion of this delete", completion: &DeleteCompletion{Done: true, Fence: 7}, fence: 7},
		{name: "successful completion of a later delete", completion: &DeleteCompletion{Done: true, Fence: 9}, fence: 7},
		{name: "completion of an earlier delete", completion: &DeleteCompletion{Done: true, Fence: 6}, fence: 7, restored: true},
		{name: "lapsed delete", completion: &DeleteCompletion{Done: true, Lapsed: true, Fence: 7}, fence: 7, restored: true},
		{name: "fence unknown to the coordinator", completion: &DeleteCompletion{Done: true}, fence: 7, restored: true},
		{name: "older node's entry", completion: &DeleteCompletion{Done: true, Fence: 7}, legacy: true, restored: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, s := reapEnv(t)
			d, p := putTrash(t, s, tc.name, tc.fence)
			if tc.legacy {
				old := filepath.Join(filepath.Dir(p), d.Encoded()+".0123456789ab")
				require.NoError(t, os.Rename(p, old))
			}
			if tc.completion != nil {
				c.mu.Lock()
				c.completed[d.String()] = *tc.completion
				c.mu.Unlock()
			}
			rep, err := s.Reap(context.Background())
			require.NoError(t, err)
			require.Len(t, rep.Plan.Trash, 1)
			require.Empty(t, trashEntries(t, s), "the entry is settled")
			if tc.restored {
				b, err := os.ReadFile(s.blobPath(d))
				require.NoError(t, err, "restored into place")
				require.Equal(t, tc.name, string(b))
				require.Equal(t, 1, rep.TrashRestored)
				require.Zero(t, rep.Trash)
			} else {
				require.NoFileExists(t, s.blobPath(d))
				require.Equal(t, 1, rep.Trash)
				require.Zero(t, rep.TrashRestored)
			}
		})
	}
}

// TestReaperRestoreKeepsABlobCommittedMeanwhile: a trash entry without a
// completion whose digest was committed again since is only unlinked: the
// blob in place is not replaced.
func TestReaperRestoreKeepsABlobCommittedMeanwhile(t *testing.T) {
	_, s := reapEnv(t)
	d, _ := putTrash(t, s, "again", 3)
	require.NoError(t, os.MkdirAll(filepath.Dir(s.blobPath(d)), 0o755))
	require.NoError(t, os.WriteFile(s.blobPath(d), []byte("again"), 0o644))
	committed, err := os.Stat(s.blobPath(d))
	require.NoError(t, err)
	_, err = s.Reap(context.Background())
	require.NoError(t, err)
	fi, err := os.Stat(s.blobPath(d))
	require.NoError(t, err)
	require.True(t, os.SameFile(committed, fi), "the committed blob is the one in place")
	require.Empty(t, trashEntries(t, s))
}

// TestReaperLeavesTrashWhileTheCoordinatorCannotSay: a trash entry is
// neither unlinked nor restored when the coordinator does not answer.
func TestReaperLeavesTrashWhileTheCoordinatorCannotSay(t *testing.T) {
	c, s := reapEnv(t)
	d, p := putTrash(t, s, "unknown", 5)
	c.setRefuse(func(call fakeCall) error {
		if call.Method == "DeleteCompletion" {
			return errFakeDown
		}
		return nil
	})
	rep, err := s.Reap(context.Background())
	require.NoError(t, err)
	require.FileExists(t, p)
	require.NoFileExists(t, s.blobPath(d))
	require.Zero(t, rep.Trash+rep.TrashRestored)
}

// TestTrashNames: a trash entry's name carries the digest and the fence;
// an older node's carries the digest (sha256) only; others are refused.
func TestTrashNames(t *testing.T) {
	d := digest.FromString("x")
	e, err := parseTrashName(trashName(d, 42))
	require.NoError(t, err)
	require.Equal(t, trashEntry{digest: d, fence: 42}, e)
	e, err = parseTrashName(d.Encoded() + ".0123456789ab")
	require.NoError(t, err)
	require.Equal(t, trashEntry{digest: d}, e)
	for _, bad := range []string{"x", d.Encoded() + ".sha256.notafence.abc", "zz.sha256.1.abc", d.Encoded() + ".a.b"} {
		_, err := parseTrashName(bad)
		require.Error(t, err, bad)
	}
}

// TestDeleteAnswerLostButCommitted: the coordinator committed the
// delete's unlock(success) but its answer was lost (it restarted, or the
// leader failed over, right after the commit): the deleter asks for the
// completion and, finding this delete committed, unlinks its trash entry
// instead of putting back a blob the coordinator counts as deleted. A
// lapsed completion is no proof: the blob is put back.
func TestDeleteAnswerLostButCommitted(t *testing.T) {
	for name, lapsed := range map[string]bool{"committed": false, "lapsed": true} {
		t.Run(name, func(t *testing.T) {
			c, s := reapEnv(t)
			d := putBlob(t, s, "answer lost "+name, 0)
			refuseDeleteUnlock(c, errFakeDown, func() {
				// Under the fake's mutex: what the coordinator committed
				// before the answer was lost.
				c.completed[d.String()] = DeleteCompletion{Done: true, Lapsed: lapsed, Fence: c.locks[fakeKey{api.OperationDelete, d.String()}].fence}
			})
			require.NoError(t, s.Delete(context.Background(), d))
			require.Empty(t, trashEntries(t, s))
			require.Len(t, calls(c.recorded(), "DeleteCompletion"), 1, "the deleter asked")
			if lapsed {
				require.FileExists(t, s.blobPath(d), "a lapsed completion proves nothing: the blob is back")
			} else {
				require.NoFileExists(t, s.blobPath(d), "the committed delete is finished")
			}
		})
	}
}
