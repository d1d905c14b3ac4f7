package contentv2

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/containerd/containerd/v2/core/content"
	"github.com/containerd/errdefs"
	"github.com/containerd/log"
	"github.com/opencontainers/go-digest"

	"github.com/sharedcontent/sharedcontent/lockclient"
)

// Writer opens an ingest under the blob's pull lock (SPEC §5). The digest
// comes from the descriptor or, as containerd's metadata store clears it,
// from the ref; a ref without one is a plain node-local write.
//
// In ContainerdMode a blob another node holds, or just downloaded, is
// ErrUnavailable at once (content.OpenWriter retries and then finds it via
// Info). In LibraryMode Writer waits and answers ErrAlreadyExists when the
// blob was downloaded elsewhere or is already here.
//
// The pull lock is taken even when the blob is already present, because a
// delete of it may be in flight: the lock waits for the delete, so a commit
// never lands just before the file is removed.
func (s *store) Writer(ctx context.Context, opts ...content.WriterOpt) (content.Writer, error) {
	var wo content.WriterOpts
	for _, o := range opts {
		if err := o(&wo); err != nil {
			return nil, err
		}
	}
	if wo.Ref == "" {
		return nil, fmt.Errorf("ref must not be empty: %w", errdefs.ErrInvalidArgument)
	}
	dgst := wo.Desc.Digest
	if dgst == "" {
		dgst = digestFromRef(wo.Ref)
	}
	if dgst == "" {
		s.metrics.writes.WithLabelValues("local").Inc()
		return s.openLocal(ctx, wo, nil, "")
	}
	if err := dgst.Validate(); err != nil {
		return nil, fmt.Errorf("content %v: %w: %w", dgst, errdefs.ErrInvalidArgument, err)
	}
	if s.mode == LibraryMode {
		if _, err := s.use(ctx, dgst); err == nil {
			s.metrics.writes.WithLabelValues("exists").Inc()
			return nil, fmt.Errorf("content %v: %w", dgst, errdefs.ErrAlreadyExists)
		}
		// Absent or being deleted: take the pull lock, which waits for a
		// delete in flight.
	}

	req := lockclient.Request{Type: lockclient.OperationTypePull, ResourceID: dgst.String(), NodeID: s.nodeID}
	var (
		res *lockclient.LockResult
		err error
	)
	if s.mode == ContainerdMode {
		err = s.coordinate(ctx, func(ctx context.Context) (err error) {
			res, err = s.coord.TryLock(ctx, req)
			return err
		})
	} else {
		res, err = s.coord.Lock(ctx, req)
	}
	switch {
	case errors.Is(err, lockclient.ErrLocked):
		s.metrics.writes.WithLabelValues("busy").Inc()
		return nil, fmt.Errorf("content %v: another node is downloading it: %w", dgst, errdefs.ErrUnavailable)
	case err != nil && ctx.Err() != nil:
		return nil, err
	case err != nil:
		// Fail-open: the content is addressed by digest and the ingest is
		// ours alone, so an uncoordinated download is safe; its reference
		// is recorded when the coordinator is back.
		s.metrics.writes.WithLabelValues("uncoordinated").Inc()
		s.uncoordinated(ctx, "write", dgst, err)
		return s.openLocal(ctx, wo, nil, dgst)
	case res.Skipped:
		if _, err := s.local.Info(ctx, dgst); err != nil {
			// Done elsewhere but not visible here (or removed outside the
			// protocol): download it ourselves rather than wait forever.
			log.G(ctx).WithField("digest", dgst).Warn("blob reported downloaded but not present; downloading it")
			s.metrics.writes.WithLabelValues("uncoordinated").Inc()
			return s.openLocal(ctx, wo, nil, dgst)
		}
		return nil, s.downloadedElsewhere(ctx, dgst)
	}
	s.metrics.writes.WithLabelValues("acquired").Inc()
	w, err := s.openLocal(ctx, wo, res.Lease, dgst)
	if err != nil {
		if uerr := s.coord.Unlock(context.WithoutCancel(ctx), res.Lease, false, err); uerr != nil {
			log.G(ctx).WithError(uerr).WithField("digest", dgst).Warn("unlock after failed open")
		}
		return nil, err
	}
	return w, nil
}

// downloadedElsewhere answers a Writer for a blob another node has just
// downloaded.
func (s *store) downloadedElsewhere(ctx context.Context, dgst digest.Digest) error {
	s.metrics.writes.WithLabelValues("skipped").Inc()
	if s.mode == ContainerdMode {
		// Never ErrAlreadyExists here: the fetch would count the blob as
		// done while this node's metadata never records it. The retry finds
		// it through Info (content_sharing_policy "shared", containerd's
		// default), which also registers this node.
		return fmt.Errorf("content %v: downloaded by another node, retry to share it: %w", dgst, errdefs.ErrUnavailable)
	}
	if _, err := s.use(ctx, dgst); err != nil {
		// Deleted right after it was downloaded: the caller tries again.
		return fmt.Errorf("content %v: %w: %w", dgst, errdefs.ErrUnavailable, err)
	}
	return fmt.Errorf("content %v: %w", dgst, errdefs.ErrAlreadyExists)
}

// openLocal opens the node-scoped local ingest. lease is the pull lock
// (nil when uncoordinated); dgst is the blob the lock is about.
func (s *store) openLocal(ctx context.Context, wo content.WriterOpts, lease *lockclient.Lease, dgst digest.Digest) (content.Writer, error) {
	lw, err := s.local.Writer(ctx, content.WithRef(s.nodeRef(wo.Ref)), content.WithDescriptor(wo.Desc))
	if err != nil {
		return nil, err
	}
	return &writer{Writer: lw, s: s, ref: wo.Ref, lease: lease, dgst: dgst}, nil
}

// writer is a local ingest tied to its pull lock: Commit releases the lock
// with success, Close without a commit releases it with failure so the
// next waiter takes over.
type writer struct {
	content.Writer
	s     *store
	ref   string
	dgst  digest.Digest // "" for a plain local write
	lease *lockclient.Lease

	mu       sync.Mutex
	released bool // protected by mu
}

func (w *writer) Status() (content.Status, error) {
	st, err := w.Writer.Status()
	st.Ref = w.ref
	return st, err
}

// Commit commits the blob. Success, including "already exists", releases
// the lock with success and records this node's reference; any other error
// leaves the ingest open for another Commit, as the local writer does.
func (w *writer) Commit(ctx context.Context, size int64, expected digest.Digest, opts ...content.Opt) error {
	err := w.Writer.Commit(ctx, size, expected, opts...)
	if err != nil && !errdefs.IsAlreadyExists(err) {
		return err
	}
	committed := w.Writer.Digest()
	if expected != "" {
		committed = expected
	}
	w.finish(ctx, committed)
	return err
}

func (w *writer) Close() error {
	err := w.Writer.Close()
	w.release(context.Background(), false, errors.New("writer closed without commit"))
	return err
}

// finish records a committed blob: through the lock when this writer holds
// the blob's lock, else as a plain reference.
func (w *writer) finish(ctx context.Context, committed digest.Digest) {
	if w.dgst == "" {
		return // not shared content
	}
	ctx = context.WithoutCancel(ctx)
	if w.lease != nil && committed == w.dgst {
		if err := w.release(ctx, true, nil); err == nil {
			w.s.mu.Lock()
			w.s.registered[committed] = struct{}{}
			w.s.mu.Unlock()
			return
		} else {
			// A lost lease does not lose the download: record the reference.
			log.G(ctx).WithError(err).WithField("digest", committed).Warn("pull lock lost before commit; recording the reference directly")
		}
	} else {
		w.release(ctx, false, fmt.Errorf("committed %s, not the locked %s", committed, w.dgst))
	}
	w.s.register(ctx, committed)
}

// release unlocks the pull lock once.
func (w *writer) release(ctx context.Context, success bool, opErr error) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.lease == nil || w.released {
		return nil
	}
	w.released = true
	// Commit runs inside containerd's metadata transaction: bound the wait.
	err := w.s.coordinate(ctx, func(ctx context.Context) error {
		return w.s.coord.Unlock(ctx, w.lease, success, opErr)
	})
	if err != nil && !success {
		log.G(ctx).WithError(err).WithField("digest", w.dgst).Warn("releasing pull lock after failure")
	}
	return err
}
