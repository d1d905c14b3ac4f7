package contentv2

import (
	"context"
	"strings"

	"github.com/containerd/containerd/v2/core/content"
	"github.com/containerd/errdefs"
	"github.com/containerd/log"
)

// Half-made ingests (docs/design.md §8.18). Opening a local writer makes
// ingest/<id>/ and writes its ref before it creates its data; a root that
// fails in between (a full filesystem, GlusterFS's ENOTCONN with every
// brick down) leaves a directory with a ref and no data, which no status
// can read. containerd's local store means to skip what vanished while it
// lists, but its status error for a missing data file is not
// os.IsNotExist, so its ListStatuses fails on such a directory — every
// node's, since the ingests of all nodes share one directory — and with
// it containerd's content GC. So this store lists the ingests itself
// (listing): it reads only the ref files, skips the other nodes' ingests,
// and skips (and remembers) its own that have no status.
//
// A half-made ingest of this node is removed once the root is ready
// (retryHalfMade, at each probe of the root that passes), and only under
// the local store's lock of its ref: opening a writer takes that lock, so
// an open writer of the ref (or one opening it) is never touched, and a
// writer that found data there (a resumable ingest) is left alone.

// ownIngests lists the node-scoped refs of this node's ingests in the
// root from their ref files. An ingest whose ref file is gone (being
// made or removed) is skipped, as containerd's store skips it.
func (s *store) ownIngests(ctx context.Context) ([]string, error) {
	var refs []string
	err := s.guard.do(ctx, "list_statuses", func() error {
		return eachIngest(s.root, func(_, nref string) error {
			if strings.HasPrefix(nref, s.nodeID+"/") {
				refs = append(refs, nref)
			}
			return nil
		})
	})
	if err != nil {
		return nil, err
	}
	return refs, nil
}

// rememberHalfMade records this node's ingest nref for removal once the
// root is ready; the first time it logs why.
func (s *store) rememberHalfMade(ctx context.Context, nref string, cause error) {
	s.mu.Lock()
	if s.halfMade == nil {
		s.halfMade = map[string]bool{}
	}
	known := s.halfMade[nref]
	s.halfMade[nref] = true
	s.mu.Unlock()
	if !known {
		log.G(ctx).WithError(cause).WithField("ref", nref).
			Warn("half-made ingest (no readable status): left out of listings, removed once the shared root is ready and no writer of it is open")
	}
}

// halfMadeRefs returns the remembered half-made ingests.
func (s *store) halfMadeRefs() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	refs := make([]string, 0, len(s.halfMade))
	for r := range s.halfMade {
		refs = append(refs, r)
	}
	return refs
}

func (s *store) forgetHalfMade(nref string) {
	s.mu.Lock()
	delete(s.halfMade, nref)
	s.mu.Unlock()
}

// retryHalfMade removes the remembered half-made ingests; one it cannot
// remove now stays remembered for the next pass.
func (s *store) retryHalfMade(ctx context.Context) {
	for _, nref := range s.halfMadeRefs() {
		removed, err := s.removeHalfMade(ctx, nref)
		l := log.G(ctx).WithField("ref", nref)
		switch {
		case errdefs.IsUnavailable(err):
			l.WithError(err).Debug("half-made ingest kept for now: a writer of it is open, or the root is not answering")
		case err != nil:
			l.WithError(err).Warn("removing a half-made ingest failed; retried at the next probe of the shared root")
		case removed:
			s.forgetHalfMade(nref)
			s.metrics.discarded.WithLabelValues("open").Inc()
			l.Warn("half-made ingest removed")
		default:
			s.forgetHalfMade(nref)
			l.Info("half-made ingest kept: a writer has since written it, and it can be resumed")
		}
	}
}

// removeHalfMade removes the ingest nref under the local store's lock of
// its ref, unless it holds data (a writer made it whole since). An open
// writer of nref holds the lock: the open here fails as unavailable and
// nothing is removed.
func (s *store) removeHalfMade(ctx context.Context, nref string) (removed bool, err error) {
	w, err := s.local.Writer(ctx, content.WithRef(nref))
	if err != nil {
		return false, err
	}
	defer func() {
		if cerr := w.Close(); cerr != nil && err == nil && !removed {
			err = cerr
		}
	}()
	st, err := w.Status()
	if err != nil {
		return false, err
	}
	if st.Offset > 0 {
		return false, nil
	}
	if err := s.local.Abort(ctx, nref); err != nil && !errdefs.IsNotFound(err) {
		return false, err
	}
	return true, nil
}
