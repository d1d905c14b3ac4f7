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
	"github.com/sharedcontent/sharedcontent/lockserver/api"
)

// A follower is the Writer of a blob that another node holds (docs/design.md §5.3).
// Writer returns it at once: containerd calls Writer inside a metadata
// transaction. The wait happens in Status, which containerd's fetch calls
// right after opening the writer, outside any transaction, and it is
// bounded only by the context of the Writer call (or Close, or Abort of
// its ref). It ends in one of two ways:
//
//   - the holder succeeded: the blob is in the shared directory and this
//     node is referenced as its user; Status reports Offset == Total ==
//     its size, fetch calls Commit without downloading, and Commit
//     returns nil (it checks the reference again, never waits);
//   - the lock was handed to this node (the holder failed or died): the
//     follower becomes the holder, an empty ingest under the pull lock;
//     Status reports offset 0 and fetch downloads into it.
//
// The offsets a follower reports stay those a proxy client can follow
// (plugin/, docs/design.md §5.4): 0 until the
// wait ends, then 0 again after a hand-off (the ingest is emptied), or the
// blob's size.

// Follower is a Writer of a blob held by another node. Status waits for
// the outcome as described above; StatusNow answers at once.
type Follower interface {
	content.Writer
	// StatusNow is Status without the wait: while the follower waits it
	// reports offset 0 and the expected total.
	StatusNow() (content.Status, error)
}

const (
	// followPauseMin and followPauseMax bound the pause between two tries
	// of a follower whose coordinator cannot queue it (unreachable, or a
	// server that does not queue pulls): containerd's own backoff range.
	followPauseMin = 16 * time.Millisecond
	followPauseMax = 2 * time.Second
)

var _ Follower = (*follower)(nil)

// follower implements Follower.
type follower struct {
	s       *store
	ctx     context.Context    // the Writer call's, until Close or Abort; bounds the wait
	cancel  context.CancelFunc // ends ctx
	wo      content.WriterOpts
	dgst    digest.Digest
	started time.Time

	wait sync.Mutex // held while waiting: one wait at a time

	// progress is what this follower knows of the holder's ingest
	// (progress.go).
	progress holderProgress

	mu     sync.Mutex
	w      content.Writer // protected by mu; the ingest once this node downloads
	done   bool           // protected by mu; the holder succeeded, this node is referenced
	size   int64          // protected by mu; the blob's size when done
	err    error          // protected by mu; why the wait failed (final)
	closed bool           // protected by mu
}

// newFollower returns the follower of a blob that another node holds and
// lists it among this node's ingests.
func (s *store) newFollower(ctx context.Context, wo content.WriterOpts, dgst digest.Digest) *follower {
	fctx, cancel := context.WithCancel(ctx)
	f := &follower{s: s, ctx: fctx, cancel: cancel, wo: wo, dgst: dgst, started: time.Now()}
	s.mu.Lock()
	s.followers[wo.Ref] = f
	s.mu.Unlock()
	return f
}

// Status waits until the holder has finished, then reports the outcome.
func (f *follower) Status() (content.Status, error) {
	if err := f.follow(); err != nil {
		return content.Status{}, err
	}
	return f.StatusNow()
}

func (f *follower) StatusNow() (content.Status, error) {
	f.mu.Lock()
	w, done, size, err := f.w, f.done, f.size, f.err
	f.mu.Unlock()
	switch {
	case w != nil:
		return w.Status()
	case err != nil:
		return content.Status{}, err
	}
	st := content.Status{Ref: f.wo.Ref, Total: f.wo.Desc.Size, Expected: f.dgst, StartedAt: f.started, UpdatedAt: f.started}
	if done {
		st.Offset, st.Total = size, size
	}
	return st, nil
}

// follow waits for the outcome once; later calls return at once.
func (f *follower) follow() error {
	f.wait.Lock()
	defer f.wait.Unlock()
	f.mu.Lock()
	resolved := f.w != nil || f.done || f.err != nil
	f.mu.Unlock()
	if resolved {
		return f.outcomeErr()
	}
	f.s.metrics.followersWaiting.Inc()
	w, size, err := f.s.follow(f.ctx, f.wo, f.dgst)
	f.s.metrics.followersWaiting.Dec()
	f.mu.Lock()
	closed := f.closed
	switch {
	case closed && err == nil:
		err = fmt.Errorf("content %v: writer closed while following: %w", f.dgst, errdefs.ErrAborted)
	case err != nil && f.ctx.Err() != nil:
		err = fmt.Errorf("content %v: following the holder: %w", f.dgst, err)
	}
	switch {
	case err != nil:
		f.err = err
	case w != nil:
		f.w = w
	default:
		f.done, f.size = true, size
	}
	f.mu.Unlock()
	f.s.metrics.followerWaits.WithLabelValues(waitOutcome(w, err, closed)).Observe(time.Since(f.started).Seconds())
	if closed && w != nil {
		// Aborted or closed meanwhile: give the lock to the next waiter.
		w.Close()
	}
	return err
}

// The outcomes of a follower's wait (sharedcontent_store_follower_wait_seconds).
const (
	waitShared        = "shared"
	waitHanded        = "handed"
	waitUncoordinated = "uncoordinated"
	waitTimeout       = "timeout"
	waitCanceled      = "canceled"
	waitFailed        = "failed"
)

var waitOutcomes = []string{waitShared, waitHanded, waitUncoordinated, waitTimeout, waitCanceled, waitFailed}

// waitOutcome names how a wait ended: with the ingest w to download
// into, or the holder's success (w nil), or err; closed: the writer was
// closed or aborted meanwhile.
func waitOutcome(w content.Writer, err error, closed bool) string {
	switch {
	case closed || errors.Is(err, context.Canceled):
		return waitCanceled
	case errors.Is(err, context.DeadlineExceeded):
		return waitTimeout
	case err != nil:
		return waitFailed
	case w == nil:
		return waitShared
	}
	if lw, ok := w.(*writer); ok && lw.lock == nil {
		return waitUncoordinated
	}
	return waitHanded
}

func (f *follower) outcomeErr() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.err
}

// holder returns the ingest after a hand-off (nil otherwise) and whether
// the holder succeeded.
func (f *follower) holder() (content.Writer, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.w, f.done
}

func (f *follower) Digest() digest.Digest {
	w, done := f.holder()
	switch {
	case w != nil:
		return w.Digest()
	case done:
		return f.dgst
	}
	return ""
}

// Write waits like Status; after a hand-off it writes to the ingest. A
// blob the holder finished takes no writes.
func (f *follower) Write(p []byte) (int, error) {
	if err := f.follow(); err != nil {
		return 0, err
	}
	if w, _ := f.holder(); w != nil {
		return w.Write(p)
	}
	return 0, fmt.Errorf("content %v: downloaded by another node; nothing to write: %w", f.dgst, errdefs.ErrFailedPrecondition)
}

// Truncate waits like Status. A finished blob can only be "truncated" to
// its own size: anything else would have to rewrite a blob this node did
// not download.
func (f *follower) Truncate(size int64) error {
	if err := f.follow(); err != nil {
		return err
	}
	w, _ := f.holder()
	if w != nil {
		return w.Truncate(size)
	}
	f.mu.Lock()
	have := f.size
	f.mu.Unlock()
	if size != have {
		return fmt.Errorf("content %v: downloaded by another node (%d bytes); cannot truncate to %d: %w", f.dgst, have, size, errdefs.ErrFailedPrecondition)
	}
	return nil
}

// Commit never waits (it runs inside containerd's metadata transaction).
// After a hand-off it commits the download; after the holder's success it
// records this node's use of the blob (reference before use, docs/design.md §8.1) and
// returns nil. Called before Status has ended the wait, it fails.
func (f *follower) Commit(ctx context.Context, size int64, expected digest.Digest, opts ...content.Opt) error {
	w, done := f.holder()
	switch {
	case w != nil:
		return w.Commit(ctx, size, expected, opts...)
	case !done:
		if err := f.outcomeErr(); err != nil {
			return err
		}
		return fmt.Errorf("content %v: commit before the holder finished (call Status first): %w", f.dgst, errdefs.ErrFailedPrecondition)
	}
	f.mu.Lock()
	have := f.size
	f.mu.Unlock()
	if size != 0 && size != have {
		return fmt.Errorf("content %v: size %d, committed elsewhere with %d: %w", f.dgst, size, have, errdefs.ErrFailedPrecondition)
	}
	if expected != "" && expected != f.dgst {
		return fmt.Errorf("content %v: expected %v: %w", f.dgst, expected, errdefs.ErrFailedPrecondition)
	}
	// Referenced when the wait ended; this checks again, so that a delete
	// by this node meanwhile (which drops the reference) cannot leave
	// the blob used unreferenced. The call is bounded by the coordination
	// timeout.
	if _, err := f.s.use(ctx, f.dgst); err != nil {
		return err
	}
	f.s.dropFollower(f)
	return nil
}

// Close ends a wait in progress. After a hand-off it closes the ingest
// (an uncommitted one hands the lock on to the next waiter).
func (f *follower) Close() error {
	f.cancel()
	f.mu.Lock()
	f.closed = true
	w := f.w
	f.mu.Unlock()
	f.s.dropFollower(f)
	if w != nil {
		return w.Close()
	}
	return nil
}

// dropFollower removes f from this node's ingests.
func (s *store) dropFollower(f *follower) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.followers[f.wo.Ref] == f {
		delete(s.followers, f.wo.Ref)
	}
}

// follow waits on the coordinator until the blob's holder has finished.
// It returns either the blob's size (the holder succeeded; this node is
// referenced as a user) or an ingest for this node to download into: under
// the pull lock after a hand-off, or uncoordinated where Writer would be
// (docs/design.md §8). It waits until ctx ends.
func (s *store) follow(ctx context.Context, wo content.WriterOpts, dgst digest.Digest) (content.Writer, int64, error) {
	pause := followPauseMin
	addRef, fresh := s.journalAhead(ctx, dgst) // skipref.go
	for {
		lk, err := s.coord.Lock(ctx, api.LockRequest{Type: api.OperationPull, ResourceID: dgst.String(), AddRef: addRef})
		switch {
		case err == nil:
			w, err := s.handedOver(ctx, wo, lk, dgst)
			return w, 0, err
		case errors.Is(err, api.ErrSkipped):
			if errors.Is(err, ErrRefAdded) {
				s.tookRef(ctx, dgst, fresh)
			}
			w, size, retry, err := s.finishedElsewhere(ctx, wo, dgst)
			if !retry {
				return w, size, err
			}
		case ctx.Err() != nil:
			return nil, 0, err
		case errors.Is(err, api.ErrLocked):
			// The coordinator does not queue pulls: ask again.
		case isRefusal(err):
			return nil, 0, err
		default:
			rerr := s.failOpenRefused(err)
			if rerr == nil {
				s.metrics.follows.WithLabelValues("uncoordinated").Inc()
				s.uncoordinated(ctx, "write", dgst, err)
				w, err := s.openLocal(ctx, wo, nil, dgst)
				return w, 0, err
			}
			if !errdefs.IsUnavailable(rerr) {
				// The coordinator refuses this node: waiting changes nothing.
				return nil, 0, rerr
			}
		}
		select {
		case <-ctx.Done():
			return nil, 0, ctx.Err()
		case <-time.After(pause):
		}
		pause = min(2*pause, followPauseMax)
	}
}

// handedOver opens this node's ingest under the pull lock lk, which the
// failed holder handed on. The ingest starts empty: the proxy's client
// writes from the offset it negotiated, 0.
func (s *store) handedOver(ctx context.Context, wo content.WriterOpts, lk Lock, dgst digest.Digest) (content.Writer, error) {
	s.metrics.follows.WithLabelValues("handed").Inc()
	w, err := s.openLocal(ctx, wo, lk, dgst)
	if err == nil {
		var st content.Status
		if st, err = w.Status(); err == nil && st.Offset != 0 {
			err = w.Truncate(0)
		}
		if err != nil {
			w.Close() // releases the lock with failure
			return nil, err
		}
		return w, nil
	}
	if uerr := lk.Unlock(context.WithoutCancel(ctx), false, err); uerr != nil {
		log.G(ctx).WithError(uerr).WithField("digest", dgst).Warn("unlock after failed open")
	}
	return nil, err
}

// finishedElsewhere handles a holder's success: the blob, referenced as
// used by this node, and its size. retry: it is being deleted (wait for
// the pull lock again), or this node's use could not be recorded yet. A
// blob that is not visible here is downloaded by this node, as Writer
// does.
func (s *store) finishedElsewhere(ctx context.Context, wo content.WriterOpts, dgst digest.Digest) (w content.Writer, size int64, retry bool, err error) {
	if _, err := s.local.Info(ctx, dgst); err != nil {
		log.G(ctx).WithField("digest", dgst).Warn("blob reported downloaded but not present; downloading it")
		s.metrics.follows.WithLabelValues("uncoordinated").Inc()
		w, err := s.openLocal(ctx, wo, nil, dgst)
		return w, 0, false, err
	}
	info, err := s.use(ctx, dgst)
	switch {
	case errdefs.IsNotFound(err):
		return nil, 0, true, nil // being deleted: the pull lock waits for it
	case err != nil:
		log.G(ctx).WithError(err).WithField("digest", dgst).Debug("recording the use of a blob downloaded elsewhere; trying again")
		return nil, 0, true, nil
	case wo.Desc.Size != 0 && info.Size != wo.Desc.Size:
		return nil, 0, false, fmt.Errorf("content %v: %d bytes expected, %d committed by another node: %w", dgst, wo.Desc.Size, info.Size, errdefs.ErrFailedPrecondition)
	}
	s.metrics.follows.WithLabelValues("shared").Inc()
	return nil, info.Size, false, nil
}
