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
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// guardedStore is the local store on the shared root with every call
// under the storage timeout (deadline.go). What a call opens after its
// caller gave up (a reader, a writer) is closed there and then, so that a
// late answer leaks no file and holds no ingest's lock.
type guardedStore struct {
	cs content.Store
	g  *guard
}

// about names the subject in a stall error; other errors pass unchanged.
func about(subject string, err error) error {
	if errors.Is(err, ErrRootStalled) {
		return fmt.Errorf("%s: %w", subject, err)
	}
	return err
}

func (s *guardedStore) Info(ctx context.Context, dgst digest.Digest) (content.Info, error) {
	var info content.Info
	err := s.g.do(ctx, "info", func() (err error) { info, err = s.cs.Info(ctx, dgst); return err })
	if err != nil {
		return content.Info{}, about("content "+dgst.String(), err)
	}
	return info, nil
}

func (s *guardedStore) Update(ctx context.Context, info content.Info, fieldpaths ...string) (content.Info, error) {
	var out content.Info
	err := s.g.do(ctx, "update", func() (err error) { out, err = s.cs.Update(ctx, info, fieldpaths...); return err })
	if err != nil {
		return content.Info{}, about("content "+info.Digest.String(), err)
	}
	return out, nil
}

func (s *guardedStore) Delete(ctx context.Context, dgst digest.Digest) error {
	return about("content "+dgst.String(), s.g.do(ctx, "delete", func() error { return s.cs.Delete(ctx, dgst) }))
}

func (s *guardedStore) Status(ctx context.Context, ref string) (content.Status, error) {
	var st content.Status
	err := s.g.do(ctx, "status", func() (err error) { st, err = s.cs.Status(ctx, ref); return err })
	if err != nil {
		return content.Status{}, about("ingest "+ref, err)
	}
	return st, nil
}

func (s *guardedStore) ListStatuses(ctx context.Context, filters ...string) ([]content.Status, error) {
	var sts []content.Status
	err := s.g.do(ctx, "list_statuses", func() (err error) { sts, err = s.cs.ListStatuses(ctx, filters...); return err })
	if err != nil {
		return nil, err
	}
	return sts, nil
}

func (s *guardedStore) Abort(ctx context.Context, ref string) error {
	return about("ingest "+ref, s.g.do(ctx, "abort", func() error { return s.cs.Abort(ctx, ref) }))
}

// Walk bounds the wait for each blob, not the whole walk: fn runs in the
// caller's goroutine, one blob at a time, and its own time is not counted.
func (s *guardedStore) Walk(ctx context.Context, fn content.WalkFunc, filters ...string) error {
	type item struct {
		info  content.Info
		reply chan error
	}
	items := make(chan item)
	quit := make(chan struct{}) // closed when the caller stops
	defer close(quit)
	errQuit := errors.New("walk abandoned")
	var werr error
	c, err := s.g.start("walk", func() {
		werr = s.cs.Walk(ctx, func(info content.Info) error {
			it := item{info: info, reply: make(chan error, 1)}
			select {
			case items <- it:
			case <-quit:
				return errQuit
			}
			select {
			case err := <-it.reply:
				return err
			case <-quit:
				return errQuit
			}
		}, filters...)
	}, nil)
	if err != nil {
		return err
	}
	for {
		select {
		case it := <-items:
			c.progress(true)
			ferr := fn(it.info)
			c.progress(false)
			it.reply <- ferr
			continue
		case <-c.done:
			return werr
		case <-c.late:
		case <-ctx.Done():
		}
		return c.wait(ctx)
	}
}

func (s *guardedStore) ReaderAt(ctx context.Context, desc ocispec.Descriptor) (content.ReaderAt, error) {
	var ra content.ReaderAt
	err := s.g.doUndo(ctx, "open", func() (err error) { ra, err = s.cs.ReaderAt(ctx, desc); return err },
		func() {
			if ra != nil {
				ra.Close()
			}
		})
	if err != nil {
		return nil, about("content "+desc.Digest.String(), err)
	}
	return &guardedReaderAt{ra: ra, g: s.g, dgst: desc.Digest}, nil
}

func (s *guardedStore) Writer(ctx context.Context, opts ...content.WriterOpt) (content.Writer, error) {
	var w content.Writer
	err := s.g.doUndo(ctx, "open_writer", func() (err error) { w, err = s.cs.Writer(ctx, opts...); return err },
		func() {
			if w != nil {
				w.Close()
			}
		})
	if err != nil {
		return nil, err
	}
	return &guardedWriter{w: w, g: s.g, sem: make(chan struct{}, 1)}, nil
}

// readBufSize is the size of the pooled read buffers: containerd's
// content service reads in chunks of 1 MiB.
const readBufSize = 1 << 20

var readBufs = sync.Pool{New: func() any { b := make([]byte, readBufSize); return &b }}

// guardedReaderAt reads each chunk under the storage timeout. A read that
// goes on after its caller gave up writes into a buffer of its own, never
// into the caller's.
type guardedReaderAt struct {
	ra   content.ReaderAt
	g    *guard
	dgst digest.Digest
}

func (r *guardedReaderAt) ReadAt(p []byte, off int64) (int, error) {
	bp := readBufs.Get().(*[]byte)
	if len(p) > len(*bp) {
		b := make([]byte, len(p))
		bp = &b
	}
	buf := (*bp)[:len(p)]
	var n int
	var rerr error
	err := r.g.do(context.Background(), "read", func() error { n, rerr = r.ra.ReadAt(buf, off); return nil })
	if err != nil {
		// The read goes on with the buffer: it is not put back.
		return 0, about("content "+r.dgst.String(), err)
	}
	copy(p, buf[:n])
	if cap(*bp) == readBufSize {
		readBufs.Put(bp)
	}
	return n, rerr
}

func (r *guardedReaderAt) Size() int64 { return r.ra.Size() }

func (r *guardedReaderAt) Close() error {
	return about("content "+r.dgst.String(), r.g.do(context.Background(), "close", r.ra.Close))
}

// guardedWriter runs each call of an ingest under the storage timeout,
// one at a time (the local writer is not safe for concurrent use, and a
// stuck call is still running on it). After a call that did not answer,
// the ingest refuses further writes and commits: the caller reopens it,
// and the ingest's offset then says what reached the root. A Close that
// meets a call in progress is carried out when that call returns, so the
// ingest's ref is not left locked.
type guardedWriter struct {
	w   content.Writer
	g   *guard
	sem chan struct{} // holds a token while a call runs on w

	mu sync.Mutex
	// closeLater: Close came while a call was in progress; the call
	// closes w when it returns. closed: Close was taken on. broken: a
	// call did not answer. Protected by mu; closeLater is set only while
	// sem is held, and sem is given back under mu, so no Close is lost.
	closeLater, closed, broken bool
}

// acquire takes the right to call w, waiting at most the storage
// timeout for the call in progress.
func (w *guardedWriter) acquire(ctx context.Context, op string) error {
	select {
	case w.sem <- struct{}{}:
		return nil
	default:
	}
	t := time.NewTimer(w.g.timeout)
	defer t.Stop()
	select {
	case w.sem <- struct{}{}:
		return nil
	case <-t.C:
		return fmt.Errorf("%s: an earlier call on this ingest is stuck: %w", op, w.g.errNow())
	case <-ctx.Done():
		return ctx.Err()
	}
}

// release gives the right back, closing w first (holding the right, not
// mu, as a close may block too) if Close came meanwhile.
func (w *guardedWriter) release() {
	for {
		w.mu.Lock()
		if !w.closeLater {
			<-w.sem
			w.mu.Unlock()
			return
		}
		w.closeLater = false
		w.mu.Unlock()
		if err := w.w.Close(); err != nil {
			log.L.WithError(err).Debug("closing an ingest after the call in progress returned")
		}
	}
}

// run runs fn on w under the storage timeout.
func (w *guardedWriter) run(ctx context.Context, op string, mutates bool, fn func() error) error {
	w.mu.Lock()
	closed, broken := w.closed, w.broken
	w.mu.Unlock()
	switch {
	case closed:
		return fmt.Errorf("%s: ingest closed: %w", op, errdefs.ErrFailedPrecondition)
	case mutates && broken:
		return fmt.Errorf("%s: an earlier call on this ingest did not answer in time; reopen it: %w", op, errdefs.ErrUnavailable)
	}
	if err := w.acquire(ctx, op); err != nil {
		return err
	}
	var err error
	c, serr := w.g.start(op, func() { defer w.release(); err = fn() }, nil)
	if serr != nil {
		w.release()
		return serr
	}
	if werr := c.wait(ctx); werr != nil {
		w.mu.Lock()
		w.broken = true
		w.mu.Unlock()
		return werr
	}
	return err
}

func (w *guardedWriter) Write(p []byte) (int, error) {
	// A write that goes on after its caller gave up reads its own copy.
	data := append([]byte(nil), p...)
	var n int
	err := w.run(context.Background(), "write", true, func() (err error) { n, err = w.w.Write(data); return err })
	if errors.Is(err, ErrRootStalled) {
		return 0, err
	}
	return n, err
}

func (w *guardedWriter) Commit(ctx context.Context, size int64, expected digest.Digest, opts ...content.Opt) error {
	return w.run(ctx, "commit", true, func() error { return w.w.Commit(ctx, size, expected, opts...) })
}

func (w *guardedWriter) Truncate(size int64) error {
	return w.run(context.Background(), "truncate", true, func() error { return w.w.Truncate(size) })
}

func (w *guardedWriter) Status() (content.Status, error) {
	var st content.Status
	err := w.run(context.Background(), "status", false, func() (err error) { st, err = w.w.Status(); return err })
	if err != nil {
		return content.Status{}, err
	}
	return st, nil
}

// Digest is "" while a stuck call holds the ingest past the timeout.
func (w *guardedWriter) Digest() digest.Digest {
	if w.acquire(context.Background(), "digest") != nil {
		return ""
	}
	defer w.release()
	return w.w.Digest()
}

// Close closes the ingest now, or, when a call on it is in progress, as
// soon as that call returns.
func (w *guardedWriter) Close() error {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return nil
	}
	w.closed = true
	select {
	case w.sem <- struct{}{}:
		w.mu.Unlock()
	default:
		w.closeLater = true // the call in progress closes it (release)
		w.mu.Unlock()
		return nil
	}
	var err error
	c, serr := w.g.start("close", func() { defer func() { <-w.sem }(); err = w.w.Close() }, nil)
	if serr != nil {
		// Refused (too many calls stuck), but an ingest left open keeps
		// its ref locked: close it anyway, once per writer.
		go func() {
			defer func() { <-w.sem }()
			w.w.Close()
		}()
		return serr
	}
	if werr := c.wait(context.Background()); werr != nil {
		return werr
	}
	return err
}

// errNow is the stall error without an operation.
func (g *guard) errNow() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.errLocked("")
}
