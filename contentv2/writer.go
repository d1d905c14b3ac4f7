package contentv2

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/containerd/containerd/v2/core/content"
	"github.com/containerd/errdefs"
	"github.com/containerd/log"
	"github.com/opencontainers/go-digest"

	"github.com/sharedcontent/sharedcontent/internal/failpoint"
	"github.com/sharedcontent/sharedcontent/lockserver/api"
)

// Writer opens an ingest under the blob's pull lock (docs/design.md §5.2). The digest
// comes from the descriptor or, as containerd's metadata store clears it,
// from the ref; a ref without one is a plain node-local write.
//
// In ContainerdMode a blob another node holds gets a Follower at once,
// which waits in Status (follower.go); without the blob's size (a
// follower could not report it) it is ErrUnavailable, as is a blob another
// node just downloaded (content.OpenWriter retries and then finds it via
// Info). In LibraryMode Writer waits and answers ErrAlreadyExists when the
// blob was downloaded elsewhere or is already here.
//
// The pull lock is taken even when the blob is already present, because a
// delete of it may be in flight: the lock waits for the delete, so a commit
// never lands just before the file is removed.
func (s *store) Writer(ctx context.Context, opts ...content.WriterOpt) (content.Writer, error) {
	wo, dgst, err := writerOpts(opts)
	if err != nil {
		return nil, err
	}
	if err := s.rootw.ready(); err != nil {
		return nil, fmt.Errorf("writer %s: %w", wo.Ref, err)
	}
	if dgst == "" {
		s.metrics.writes.WithLabelValues("local").Inc()
		return s.openLocal(ctx, wo, nil, "")
	}
	if s.mode == LibraryMode {
		if _, err := s.use(ctx, dgst); err == nil {
			s.metrics.writes.WithLabelValues("exists").Inc()
			return nil, fmt.Errorf("content %v: %w", dgst, errdefs.ErrAlreadyExists)
		}
		// Absent or being deleted: take the pull lock, which waits for a
		// delete in flight.
	}
	lk, err := s.pullLock(ctx, dgst)
	if err != nil {
		return s.writerWithoutLock(ctx, wo, dgst, err)
	}
	s.metrics.writes.WithLabelValues("acquired").Inc()
	failpoint.Inject(failpoint.StoreWritePullLocked)
	return s.openLocked(ctx, wo, lk, dgst)
}

// writerOpts applies a Writer's options and returns them with the blob's
// digest: the descriptor's, else the ref's, else "" (a node-local write).
func writerOpts(opts []content.WriterOpt) (content.WriterOpts, digest.Digest, error) {
	var wo content.WriterOpts
	for _, o := range opts {
		if err := o(&wo); err != nil {
			return wo, "", err
		}
	}
	if wo.Ref == "" {
		return wo, "", fmt.Errorf("ref must not be empty: %w", errdefs.ErrInvalidArgument)
	}
	dgst := wo.Desc.Digest
	if dgst == "" {
		dgst = digestFromRef(wo.Ref)
	}
	if dgst == "" {
		return wo, "", nil
	}
	if err := dgst.Validate(); err != nil {
		return wo, "", fmt.Errorf("content %v: %w: %w", dgst, errdefs.ErrInvalidArgument, err)
	}
	return wo, dgst, nil
}

// writerWithoutLock answers a Writer whose pull lock was not granted
// (lockErr): a Follower of the node downloading the blob, an error the
// caller retries, or an uncoordinated ingest.
func (s *store) writerWithoutLock(ctx context.Context, wo content.WriterOpts, dgst digest.Digest, lockErr error) (content.Writer, error) {
	switch {
	case errors.Is(lockErr, api.ErrLocked) && s.mode == ContainerdMode && wo.Desc.Size > 0:
		s.metrics.writes.WithLabelValues("follower").Inc()
		return s.newFollower(ctx, wo, dgst), nil
	case errors.Is(lockErr, api.ErrLocked):
		s.metrics.writes.WithLabelValues("busy").Inc()
		return nil, fmt.Errorf("content %v: another node is downloading it: %w", dgst, errdefs.ErrUnavailable)
	case errors.Is(lockErr, api.ErrSkipped):
		if _, err := s.local.Info(ctx, dgst); err != nil {
			// Done elsewhere but not visible here (or removed outside the
			// protocol): download it ourselves rather than wait forever.
			log.G(ctx).WithField("digest", dgst).Warn("blob reported downloaded but not present; downloading it")
			s.metrics.writes.WithLabelValues("uncoordinated").Inc()
			return s.openLocal(ctx, wo, nil, dgst)
		}
		return nil, s.downloadedElsewhere(ctx, dgst)
	case ctx.Err() != nil:
		return nil, lockErr
	}
	return s.failOpenWriter(ctx, wo, dgst, lockErr)
}

// failOpenWriter opens an uncoordinated ingest while the coordinator is
// unreachable (docs/design.md §8.8), only once this node's session has surely expired:
// the coordinator then refuses every delete until this node syncs. The
// content is addressed by digest and the ingest is ours alone; Commit
// journals the use. Before that it is ErrUnavailable, saying how long.
func (s *store) failOpenWriter(ctx context.Context, wo content.WriterOpts, dgst digest.Digest, lockErr error) (content.Writer, error) {
	if err := s.failOpenRefused(lockErr); err != nil {
		s.metrics.waits.Inc()
		return nil, fmt.Errorf("content %v: %w", dgst, err)
	}
	s.metrics.writes.WithLabelValues("uncoordinated").Inc()
	s.uncoordinated(ctx, "write", dgst, lockErr)
	return s.openLocal(ctx, wo, nil, dgst)
}

// openLocked opens the ingest under the pull lock lk, giving the lock
// back when that fails.
func (s *store) openLocked(ctx context.Context, wo content.WriterOpts, lk Lock, dgst digest.Digest) (content.Writer, error) {
	w, err := s.openLocal(ctx, wo, lk, dgst)
	if err != nil {
		if uerr := lk.Unlock(context.WithoutCancel(ctx), false, err); uerr != nil {
			log.G(ctx).WithError(uerr).WithField("digest", dgst).Warn("unlock after failed open")
		}
		return nil, err
	}
	return w, nil
}

// pullLock takes the blob's pull lock: at once or not at all in
// ContainerdMode, waiting in LibraryMode.
func (s *store) pullLock(ctx context.Context, dgst digest.Digest) (lk Lock, err error) {
	req := api.LockRequest{Type: api.OperationPull, ResourceID: dgst.String(), Wait: new(s.mode == LibraryMode)}
	if s.mode == LibraryMode {
		return s.coord.Lock(ctx, req)
	}
	err = s.coordinate(ctx, func(ctx context.Context) error {
		lk, err = s.coord.Lock(ctx, req)
		return err
	})
	return lk, err
}

// downloadedElsewhere answers a Writer for a blob another node has just
// downloaded.
func (s *store) downloadedElsewhere(ctx context.Context, dgst digest.Digest) error {
	s.metrics.writes.WithLabelValues("skipped").Inc()
	if s.mode == ContainerdMode {
		// Never ErrAlreadyExists here: the fetch would count the blob as
		// done while this node's metadata never records it. The retry finds
		// it through Info (content_sharing_policy "shared", containerd's
		// default), which also references it for this node.
		return fmt.Errorf("content %v: downloaded by another node, retry to share it: %w", dgst, errdefs.ErrUnavailable)
	}
	if _, err := s.use(ctx, dgst); err != nil {
		// Deleted right after it was downloaded: the caller tries again.
		return fmt.Errorf("content %v: %w: %w", dgst, errdefs.ErrUnavailable, err)
	}
	return fmt.Errorf("content %v: %w", dgst, errdefs.ErrAlreadyExists)
}

// openLocal opens the node-scoped local ingest. lk is the pull lock (nil
// when uncoordinated); dgst is the blob the lock is about.
func (s *store) openLocal(ctx context.Context, wo content.WriterOpts, lk Lock, dgst digest.Digest) (content.Writer, error) {
	lw, err := s.local.Writer(ctx, content.WithRef(s.nodeRef(wo.Ref)), content.WithDescriptor(wo.Desc))
	if errdefs.IsAlreadyExists(err) && lk != nil {
		// Under the pull lock, yet this node's view shows the file: a
		// stale view of a deleted blob, or one put back uncoordinated
		// (its use, if tried, was refused). ErrAlreadyExists would have
		// the caller use it unreferenced; download it instead, as
		// containerd's metadata store always does (it opens backend
		// writers without the digest): Commit references it, then finds
		// it there or puts it back.
		desc := wo.Desc
		desc.Digest = ""
		lw, err = s.local.Writer(ctx, content.WithRef(s.nodeRef(wo.Ref)), content.WithDescriptor(desc))
	}
	if err != nil {
		s.discardFailedOpen(ctx, wo.Ref, err)
		return nil, err
	}
	w := &writer{Writer: lw, s: s, ref: wo.Ref, lock: lk, dgst: dgst}
	if dgst != "" {
		w.startDownload()
	}
	return w, nil
}

// discardFailedOpen removes what a failed open of the local ingest ref
// left (docs/design.md §8.18): a full filesystem fails it half-made, with a
// directory whose status no listing can read; one it cannot remove now is
// removed once the root is ready (halfmade.go). An ingest that is in use
// (locked), a blob that exists, or a bad argument leave nothing to remove.
func (s *store) discardFailedOpen(ctx context.Context, ref string, openErr error) {
	if errdefs.IsAlreadyExists(openErr) || errdefs.IsUnavailable(openErr) || errdefs.IsInvalidArgument(openErr) {
		return
	}
	if err := s.local.Abort(ctx, s.nodeRef(ref)); err == nil {
		s.metrics.discarded.WithLabelValues("open").Inc()
		log.G(ctx).WithError(openErr).WithField("ref", ref).Warn("ingest discarded: opening it failed")
	} else if !errdefs.IsNotFound(err) {
		s.rememberHalfMade(ctx, s.nodeRef(ref), fmt.Errorf("opening it failed: %w; discarding it failed: %w", openErr, err))
	}
}

// writer is a local ingest tied to its pull lock: Commit releases the lock
// with success, Close without a commit releases it with failure so the
// next waiter takes over.
type writer struct {
	content.Writer
	s    *store
	ref  string
	dgst digest.Digest // "" for a plain local write
	lock Lock          // nil when not holding the pull lock

	mu       sync.Mutex
	released bool  // protected by mu
	failed   error // protected by mu; the write that discarded the ingest
	// downloading: counted in the in-flight downloads, with written bytes
	// (docs/design.md §5.10), until the writer commits, closes or is
	// discarded. Protected by mu.
	downloading bool
	written     int64
}

// startDownload counts the writer among the downloads in flight, with the
// bytes its ingest holds already.
func (w *writer) startDownload() {
	st, err := w.Writer.Status()
	w.mu.Lock()
	defer w.mu.Unlock()
	w.downloading = true
	if err == nil {
		w.written = st.Offset
	}
	w.s.metrics.downloads.Inc()
	w.s.metrics.downloadBytes.Add(float64(w.written))
}

// counted sets the ingest's length counted in the in-flight bytes to
// next(the length counted so far).
func (w *writer) counted(next func(int64) int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.downloading {
		size := next(w.written)
		w.s.metrics.downloadBytes.Add(float64(size - w.written))
		w.written = size
	}
}

// endDownloadLocked takes the writer out of the downloads in flight. w.mu
// is held.
func (w *writer) endDownloadLocked() {
	if w.downloading {
		w.downloading = false
		w.s.metrics.downloads.Dec()
		w.s.metrics.downloadBytes.Sub(float64(w.written))
	}
}

func (w *writer) Status() (content.Status, error) {
	if err := w.discarded(); err != nil {
		return content.Status{}, err
	}
	st, err := w.Writer.Status()
	st.Ref = w.ref
	return st, err
}

// Write writes to the ingest. A write that fails (a full shared
// filesystem, an I/O error) discards the ingest at once (docs/design.md
// §8.18): its data is unknown past what the file holds and the local
// writer's offset counts bytes it never wrote, so nothing would resume it
// safely, and on a full filesystem it would keep space the next pull
// needs. The pull lock goes to the next waiter; the writer answers every
// later call with the error.
func (w *writer) Write(p []byte) (int, error) {
	if err := w.discarded(); err != nil {
		return 0, err
	}
	n, err := w.Writer.Write(p)
	if err != nil {
		w.discard("write", err)
	} else {
		w.counted(func(had int64) int64 { return had + int64(n) })
	}
	return n, err
}

func (w *writer) Truncate(size int64) error {
	if err := w.discarded(); err != nil {
		return err
	}
	if err := w.Writer.Truncate(size); err != nil {
		return err
	}
	w.counted(func(int64) int64 { return size })
	return nil
}

// discarded returns why the ingest was discarded, nil while it was not.
func (w *writer) discarded() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.failed == nil {
		return nil
	}
	return fmt.Errorf("ingest %s discarded after a failed write: %w (%v)", w.ref, errdefs.ErrAborted, w.failed)
}

// discard closes and removes the ingest after a failed write or local
// commit, and releases the pull lock with failure.
func (w *writer) discard(op string, cause error) {
	w.mu.Lock()
	first := w.failed == nil
	if first {
		w.failed = cause
	}
	w.mu.Unlock()
	if !first {
		return
	}
	ctx := context.Background()
	l := log.G(ctx).WithError(cause).WithField("ref", w.ref).WithField("node", w.s.nodeID)
	if err := w.Writer.Close(); err != nil {
		l.WithField("close", err).Debug("closing a failed ingest")
	}
	if err := w.s.local.Abort(ctx, w.s.nodeRef(w.ref)); err != nil && !errdefs.IsNotFound(err) {
		l.WithField("abort", err).Warn("discarding a failed ingest")
	} else {
		l.WithField("op", op).Warn("ingest discarded: writing it failed")
	}
	w.s.metrics.discarded.WithLabelValues(op).Inc()
	w.release(ctx, false, cause)
}

// Commit commits the blob. This node's reference to the committed digest
// (the expected one, or the one computed) is recorded (journal, then
// coordinator) before the blob becomes visible in blobs/, so that no
// delete can remove it in between, even if the pull lock was lost, and
// whatever the writer was opened with: a writer opened without a digest
// (an import, `ctr content ingest`) is referenced at its commit like any
// other (docs/design.md §8.1). Success, including "already exists", then
// releases the lock with success; any other error leaves the ingest open
// for another Commit, as the local writer does.
//
// A reference that reached the journal but not the coordinator (a
// failover in progress) does not fail the commit while the pull lease on
// the blob is surely held: the lease's end records the reference, by the
// unlock(success) sent in the background, or by its expiry
// (docs/design.md §8.17).
func (w *writer) Commit(ctx context.Context, size int64, expected digest.Digest, opts ...content.Opt) error {
	if err := w.discarded(); err != nil {
		return err
	}
	// A blob becomes visible only in a root that still checks out
	// (docs/design.md §8.19).
	if err := w.s.rootw.check(ctx); err != nil {
		return fmt.Errorf("commit %s: %w", expected, err)
	}
	committed := expected
	if committed == "" {
		committed = w.Writer.Digest()
	}
	if computed := w.Writer.Digest(); expected != "" && expected.Algorithm() == computed.Algorithm() && expected != computed {
		// Not the expected content: the local writer says so, and this
		// node references nothing.
		return w.Writer.Commit(ctx, size, expected, opts...)
	}
	deferred := false
	if err := w.referenceCommit(ctx, committed); err != nil {
		if !w.leaseCarries(ctx, committed, err) {
			return err
		}
		deferred = true
	}
	failpoint.Inject(failpoint.StoreWriteBeforeRename)
	err := w.Writer.Commit(ctx, size, expected, opts...)
	if err != nil && !errdefs.IsAlreadyExists(err) {
		if !errdefs.IsFailedPrecondition(err) {
			// Not the content's fault (a wrong size or digest keeps the
			// ingest, to be committed again as containerd's contract
			// says) but the storage's: a full filesystem failed the
			// sync or the directory. Discard it, as after a failed write.
			w.discard("commit", err)
		}
		return err
	}
	failpoint.Inject(failpoint.StoreWriteAfterRename)
	switch {
	case deferred:
		w.releaseLater(ctx)
	case committed == w.dgst:
		w.release(ctx, true, nil)
	default:
		w.release(ctx, false, fmt.Errorf("committed %s, not the locked %s", committed, w.dgst))
	}
	failpoint.Inject(failpoint.StoreWriteAfterUnlock)
	return err
}

// referenceCommit records this node's reference to dgst before Commit
// makes it visible. Under the pull lock no delete of dgst is in flight,
// and the commit puts the blob in place whatever this node's view shows
// (docs/design.md §8.9). Without it (a writer opened without a digest, or
// uncoordinated), a blob this node already sees is a use of a found blob,
// so the coordinator checks the view is not a stale one of a deleted
// blob; otherwise it is a commit. A delete in flight, or a view of a
// blob just deleted that Commit could not put back (the local store never
// replaces a file it sees), is ErrUnavailable: the ingest is kept for
// another Commit, which succeeds once the delete is done and the view
// fresh.
func (w *writer) referenceCommit(ctx context.Context, dgst digest.Digest) error {
	found := false
	if w.lock == nil {
		_, err := w.s.local.Info(ctx, dgst)
		found = err == nil
	}
	err := w.s.reference(ctx, dgst, found)
	if errdefs.IsNotFound(err) {
		return fmt.Errorf("content %v: being deleted, commit again once the delete is done: %w (%v)", dgst, errdefs.ErrUnavailable, err)
	}
	return err
}

// leaseCarries reports whether Commit may go on although this node's
// reference to dgst failed with refErr (docs/design.md §8.17): the
// coordinator was not reached (a member that may not fail open yet, not a
// refusal), the use is in the journal, the blob is the one the pull lock
// is on, and that lease is surely held for a while yet. Then no delete of
// the blob can be granted until the lease ends, and its end records the
// reference.
func (w *writer) leaseCarries(ctx context.Context, dgst digest.Digest, refErr error) bool {
	if w.lock == nil || dgst != w.dgst || ctx.Err() != nil || !errdefs.IsUnavailable(refErr) ||
		errors.Is(refErr, api.ErrDuplicateNode) || errors.Is(refErr, api.ErrWrongCluster) || errors.Is(refErr, api.ErrNoSession) ||
		!w.s.joined() || !w.s.journal.has(dgst) {
		return false
	}
	// The rename follows at once; leaseMargin covers it.
	if !time.Now().Add(leaseMargin).Before(w.lock.HeldUntil()) {
		return false
	}
	log.G(ctx).WithError(refErr).WithField("digest", dgst).WithField("node", w.s.nodeID).
		Warn("reference not recorded: committing under the pull lease, whose end records it")
	return true
}

// leaseMargin is how long a pull lease must surely be held yet for a
// commit to leave its reference to the lease's end: the rename that
// follows the check must happen while the lease is held.
const leaseMargin = time.Second

// releaseLater releases the pull lock with success in the background,
// retried across a failover by the coordinator client, so that the
// metadata transaction Commit runs in is not held meanwhile. Close waits
// for it. The reference is not cached: the next use asks again.
func (w *writer) releaseLater(ctx context.Context) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.endDownloadLocked()
	if w.lock == nil || w.released {
		return
	}
	w.released = true
	w.s.unlockLater(ctx, w.lock, w.dgst, true, nil)
}

// unlockLater sends lk's unlock in the background, retried across a
// failover by the coordinator client (and once more after a no_session
// refusal); Close waits for it. Sent, the unlock has ended the lease's
// keepalive whatever its answer: at worst the lease expires. Neither the
// unlock nor its retry after a no_session refusal goes through the down
// mark: a retry the mark answered would leave the lease to its expiry, a
// lease TTL in which every waiter of the blob waits (docs/design.md
// §10.6).
func (s *store) unlockLater(ctx context.Context, lk Lock, dgst digest.Digest, success bool, cause error) {
	ctx = context.WithoutCancel(ctx)
	s.unlocks.Add(1)
	go func() {
		defer s.unlocks.Done()
		unlock := func(ctx context.Context) error { return lk.Unlock(ctx, success, cause) }
		err := unlock(ctx)
		if errors.Is(err, api.ErrNoSession) {
			err = s.againAfterSession(ctx, "unlock", dgst, err, unlock)
		}
		l := log.G(ctx).WithField("digest", dgst).WithField("node", s.nodeID).WithField("success", success)
		if err != nil {
			l.WithError(err).Warn("releasing the pull lock in the background failed; the lease's expiry ends it (and records a success's reference)")
			return
		}
		l.Info("pull lock released in the background")
	}()
}

func (w *writer) Close() error {
	err := w.Writer.Close()
	w.release(context.Background(), false, errors.New("writer closed without commit"))
	return err
}

// release unlocks the pull lock once.
func (w *writer) release(ctx context.Context, success bool, opErr error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.endDownloadLocked()
	if w.lock == nil || w.released {
		return
	}
	w.released = true
	// Commit runs inside containerd's metadata transaction: bound the wait.
	ctx = context.WithoutCancel(ctx)
	unlock := func(ctx context.Context) error { return w.lock.Unlock(ctx, success, opErr) }
	err := w.s.coordinate(ctx, unlock)
	if errors.Is(err, api.ErrNoSession) {
		// The success records the reference and ends a delete's
		// completion: done before Commit returns, as a reference is.
		err = w.s.afterSession(ctx, "unlock", w.dgst, err, unlock)
	}
	if errors.Is(err, errCoordinatorDown) {
		// Not sent (the unlock, or its retry after a no_session refusal):
		// this node has the coordinator marked down (another of its calls
		// failed). The lease goes back all the same, in the background:
		// never unlocked, its keepalive would hold it, and every waiter of
		// the blob would wait, for as long as this node runs; a retry not
		// sent leaves it to its expiry, a lease TTL (docs/design.md
		// §10.6). One unlock costs the coordinator less than the
		// keepalives, or the waiters' wait, it ends.
		w.s.unlockLater(ctx, w.lock, w.dgst, success, opErr)
		return
	}
	if err != nil {
		// The reference is recorded already; a lost lease costs the
		// waiters at most its TTL.
		log.G(ctx).WithError(err).WithField("digest", w.dgst).WithField("success", success).Warn("releasing pull lock")
	}
}
