package contentv2

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/containerd/log"
	"github.com/opencontainers/go-digest"
)

// The trash (docs/design.md §8.11). A deleter renames the blob into
// <root>/.trash/ under a name that carries its digest and the fence of its
// delete lease: <encoded>.<algorithm>.<fence>.<random>. The rename is the
// reversible step: the entry is unlinked only once the coordinator has
// answered the delete's unlock(success), which commits the drop of the
// blob's references and records the delete's completion; on any other
// outcome the blob is put back. An entry of a deleter that crashed in
// between is the reaper's: it unlinks it only when the coordinator holds a
// successful completion of that delete (or a later one), and restores it
// otherwise. An older node's entry (<encoded>.<random>, no fence) proves
// nothing and is restored too.

// trashEntry is what a trash entry's name says.
type trashEntry struct {
	digest digest.Digest
	// fence is the delete lease's fence; 0 for an entry of an older node.
	fence uint64
}

// trashName returns a unique name for dgst trashed under a lease with fence.
func trashName(dgst digest.Digest, fence uint64) string {
	return dgst.Encoded() + "." + dgst.Algorithm().String() + "." + strconv.FormatUint(fence, 10) + "." + newID()[:12]
}

// parseTrashName reads a trash entry's name: the current form, or an older
// node's <encoded>.<random> (sha256, fence 0).
func parseTrashName(name string) (trashEntry, error) {
	parts := strings.Split(name, ".")
	var e trashEntry
	switch {
	case len(parts) == 2:
		e.digest = digest.NewDigestFromEncoded(digest.SHA256, parts[0])
	case len(parts) >= 4:
		fence, err := strconv.ParseUint(parts[len(parts)-2], 10, 64)
		if err != nil {
			return trashEntry{}, fmt.Errorf("trash entry %q: fence: %w", name, err)
		}
		alg := digest.Algorithm(strings.Join(parts[1:len(parts)-2], "."))
		e.digest, e.fence = digest.NewDigestFromEncoded(alg, parts[0]), fence
	default:
		return trashEntry{}, fmt.Errorf("trash entry %q: not <encoded>.<algorithm>.<fence>.<random>", name)
	}
	if err := e.digest.Validate(); err != nil {
		return trashEntry{}, fmt.Errorf("trash entry %q: %w", name, err)
	}
	return e, nil
}

// moveToTrash renames the blob to a unique name under <root>/.trash that
// carries fence, and returns that name ("" when the blob was already gone).
func (s *store) moveToTrash(dgst digest.Digest, fence uint64) (string, error) {
	dir := filepath.Join(s.root, TrashDir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	to := filepath.Join(dir, trashName(dgst, fence))
	if err := os.Rename(s.blobPath(dgst), to); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return "", nil
		}
		return "", err
	}
	return to, nil
}

// restoreTrashed puts the trash entry trashed back as the blob dgst in
// root, without replacing one: a hard link that fails if the blob exists,
// then the unlink of the entry. A blob committed meanwhile under the same
// digest has the same content, so the entry is then only unlinked. It
// returns whether this call put the blob back.
func restoreTrashed(root, trashed string, dgst digest.Digest) (bool, error) {
	to := blobPathIn(root, dgst)
	if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
		return false, err
	}
	restored := true
	if err := os.Link(trashed, to); err != nil {
		switch {
		case errors.Is(err, fs.ErrExist):
			restored = false
		case errors.Is(err, fs.ErrNotExist):
			// The entry is gone: another restore (the reaper's, or the
			// deleter's) or an unlink after a success took it.
			return false, nil
		default:
			return false, err
		}
	}
	if err := os.Remove(trashed); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return restored, err
	}
	return restored, nil
}

// settleTrash is the reaper's act on one trash entry (path relative to
// the root): it unlinks the entry when the coordinator holds a successful
// completion of its delete or of a later one, and puts the blob back
// otherwise. removed and restored say which happened; neither when the
// coordinator could not be asked (the next pass retries).
func (s *store) settleTrash(ctx context.Context, path string) (removed, restored bool) {
	full := filepath.Join(s.root, path)
	l := log.G(ctx).WithField("entry", path).WithField("node", s.nodeID)
	e, err := parseTrashName(filepath.Base(path))
	if err != nil {
		// Not a deleter's entry: nothing to put back.
		l.WithError(err).Warn("reaper: an unknown name in the trash; removed")
		return os.RemoveAll(full) == nil, false
	}
	c, err := s.coord.DeleteCompletion(ctx, e.digest)
	if err != nil {
		l.WithError(err).Info("reaper: could not ask the coordinator about a trash entry; the next pass retries")
		return false, false
	}
	if c.Succeeded(e.fence) {
		return os.Remove(full) == nil, false
	}
	put, err := restoreTrashed(s.root, full, e.digest)
	if err != nil {
		l.WithError(err).Warn("reaper: restoring a trash entry")
		return false, false
	}
	l.WithField("digest", e.digest).WithField("fence", e.fence).WithField("put_back", put).
		Warn("reaper: a trash entry without a successful delete of it; restored (a blob of that digest is in place)")
	return false, true
}
