package contentv2

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/containerd/containerd/v2/core/content"
	"github.com/containerd/containerd/v2/plugins/content/local"
	"github.com/containerd/errdefs"
	"github.com/containerd/log"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sharedcontent/sharedcontent/lockclient"
)

// Mode chooses how Writer behaves when another node holds a blob's lock.
type Mode int

const (
	// ContainerdMode (the plugin's default) never blocks in Writer: the
	// metadata store calls it inside a bolt write transaction. A blob that
	// another node is downloading, or has downloaded, is ErrUnavailable,
	// which makes content.OpenWriter retry; the retry finds the blob
	// through Info and records it without downloading.
	ContainerdMode Mode = iota
	// LibraryMode (direct Go use) waits in the lock queue and answers
	// ErrAlreadyExists when another node downloaded the blob meanwhile.
	LibraryMode
)

const (
	// DefaultRefRetryInterval is how often references recorded while the
	// coordinator was unreachable are retried. It is also how long the
	// store stops asking an unreachable coordinator before probing again.
	DefaultRefRetryInterval = 5 * time.Second
	// DefaultCoordinationTimeout bounds one coordination call made while
	// containerd waits (Writer runs inside a metadata transaction).
	DefaultCoordinationTimeout = 2 * time.Second
)

// Store is a content.Store on a shared directory. Close stops its
// background work; it does not close the coordinator.
type Store interface {
	content.Store
	Close() error
}

// Option configures NewStore.
type Option func(*store)

// WithMode sets the Writer behaviour (default ContainerdMode).
func WithMode(m Mode) Option { return func(s *store) { s.mode = m } }

// WithRegisterer registers the store's metrics.
func WithRegisterer(r prometheus.Registerer) Option { return func(s *store) { s.registerer = r } }

// WithRefRetryInterval sets how often pending references are retried.
func WithRefRetryInterval(d time.Duration) Option { return func(s *store) { s.refRetry = d } }

// WithCoordinationTimeout bounds each coordination call that containerd
// waits on (default DefaultCoordinationTimeout).
func WithCoordinationTimeout(d time.Duration) Option { return func(s *store) { s.coordTimeout = d } }

// WithLocalStore replaces the local store on root (tests inject failures
// this way). It must be rooted in the shared directory.
func WithLocalStore(cs content.Store) Option { return func(s *store) { s.local = cs } }

// store implements Store.
type store struct {
	local        content.Store
	nodeID       string
	coord        Coordinator
	mode         Mode
	registerer   prometheus.Registerer
	refRetry     time.Duration
	coordTimeout time.Duration
	metrics      *metrics

	mu         sync.Mutex
	registered map[digest.Digest]struct{} // protected by mu; refs this node has recorded
	pending    map[digest.Digest]struct{} // protected by mu; refs to record when the coordinator is back
	// downUntil is when to ask the coordinator again after it was found
	// unreachable; until then operations fail open or closed at once
	// instead of each waiting out a timeout. Protected by mu.
	downUntil time.Time

	stop chan struct{} // closed by Close
	wg   sync.WaitGroup
}

// NewStore returns a Store for node nodeID over the shared content
// directory root, coordinated through coord. Labels are kept per node in
// memory: containerd keeps its own labels in its metadata store.
func NewStore(root, nodeID string, coord Coordinator, opts ...Option) (Store, error) {
	if nodeID == "" || strings.ContainsAny(nodeID, "/\x00") {
		return nil, fmt.Errorf("node id %q: must be non-empty without '/': %w", nodeID, errdefs.ErrInvalidArgument)
	}
	if coord == nil {
		return nil, fmt.Errorf("coordinator is required: %w", errdefs.ErrInvalidArgument)
	}
	s := &store{
		nodeID:       nodeID,
		coord:        coord,
		refRetry:     DefaultRefRetryInterval,
		coordTimeout: DefaultCoordinationTimeout,
		registered:   map[digest.Digest]struct{}{},
		pending:      map[digest.Digest]struct{}{},
		stop:         make(chan struct{}),
	}
	for _, o := range opts {
		o(s)
	}
	if s.local == nil {
		cs, err := local.NewLabeledStore(root, newLabelStore())
		if err != nil {
			return nil, err
		}
		s.local = cs
	}
	m, err := newMetrics(s.registerer)
	if err != nil {
		return nil, err
	}
	s.metrics = m
	s.wg.Add(1)
	go s.retryRefs()
	return s, nil
}

func (s *store) Close() error {
	select {
	case <-s.stop:
	default:
		close(s.stop)
	}
	s.wg.Wait()
	return nil
}

// Info returns the blob's info and records that this node uses it: a node
// asks for a blob it is about to use (containerd's metadata store does so
// before recording a shared blob). While a delete of the blob is in flight
// it answers ErrNotFound, so the caller downloads it again instead.
func (s *store) Info(ctx context.Context, dgst digest.Digest) (content.Info, error) {
	return s.use(ctx, dgst)
}

// use returns the info of a blob that exists and that this node is now a
// registered referrer of, so that no other node's delete removes it. A
// blob that is absent or being deleted is ErrNotFound.
func (s *store) use(ctx context.Context, dgst digest.Digest) (content.Info, error) {
	info, err := s.local.Info(ctx, dgst)
	if err != nil {
		return info, err
	}
	s.mu.Lock()
	_, known := s.registered[dgst]
	s.mu.Unlock()
	if known {
		// Registered: no other node's delete can remove it.
		return info, nil
	}
	if err := s.register(ctx, dgst); errors.Is(err, lockclient.ErrDeleting) {
		return content.Info{}, fmt.Errorf("content %v: being deleted: %w", dgst, errdefs.ErrNotFound)
	}
	// A delete may have removed the blob between the first look and the
	// registration; once registered, none can. Look again.
	info, err = s.local.Info(ctx, dgst)
	if err != nil {
		s.mu.Lock()
		delete(s.registered, dgst)
		s.mu.Unlock()
	}
	return info, err
}

// register records this node as a referrer of dgst once (cached until this
// node deletes it). When the coordinator is unreachable the reference is
// kept pending and retried in the background; only ErrDeleting is returned.
func (s *store) register(ctx context.Context, dgst digest.Digest) error {
	s.mu.Lock()
	_, done := s.registered[dgst]
	s.mu.Unlock()
	if done {
		return nil
	}
	err := s.coordinate(ctx, func(ctx context.Context) error {
		_, err := s.coord.AddRef(ctx, dgst.String())
		return err
	})
	switch {
	case err == nil:
		s.mu.Lock()
		s.registered[dgst] = struct{}{}
		delete(s.pending, dgst)
		s.mu.Unlock()
		return nil
	case errors.Is(err, lockclient.ErrDeleting):
		return err
	default:
		s.uncoordinated(ctx, "ref", dgst, err)
		s.mu.Lock()
		s.pending[dgst] = struct{}{}
		s.mu.Unlock()
		return nil
	}
}

// retryRefs records pending references until the store closes.
func (s *store) retryRefs() {
	defer s.wg.Done()
	t := time.NewTicker(s.refRetry)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
		}
		s.mu.Lock()
		todo := make([]digest.Digest, 0, len(s.pending))
		for d := range s.pending {
			todo = append(todo, d)
		}
		s.mu.Unlock()
		for _, d := range todo {
			ctx, cancel := context.WithTimeout(context.Background(), s.refRetry)
			_, err := s.coord.AddRef(ctx, d.String())
			cancel()
			if err != nil && !errors.Is(err, lockclient.ErrDeleting) {
				break // still unreachable; try again later
			}
			s.mu.Lock()
			s.downUntil = time.Time{}
			delete(s.pending, d)
			if err == nil {
				s.registered[d] = struct{}{}
			}
			s.mu.Unlock()
			log.L.WithField("digest", d).WithField("node", s.nodeID).Info("recorded reference made while the coordinator was unreachable")
		}
		s.mu.Lock()
		s.metrics.pendingRefs.Set(float64(len(s.pending)))
		s.mu.Unlock()
	}
}

// errCoordinatorDown short-circuits calls while the coordinator is known
// to be unreachable.
var errCoordinatorDown = errors.New("coordinator unreachable recently; not asking again yet")

// coordinate runs one coordination call with the coordination timeout. A
// failure to reach the coordinator makes the next calls fail at once for
// refRetry, so an outage costs one timeout, not one per blob.
func (s *store) coordinate(ctx context.Context, call func(context.Context) error) error {
	s.mu.Lock()
	down := time.Now().Before(s.downUntil)
	s.mu.Unlock()
	if down {
		return errCoordinatorDown
	}
	cctx, cancel := context.WithTimeout(ctx, s.coordTimeout)
	defer cancel()
	err := call(cctx)
	if err != nil && !isCoordinationRefusal(err) && ctx.Err() == nil {
		s.mu.Lock()
		s.downUntil = time.Now().Add(s.refRetry)
		s.mu.Unlock()
	}
	return err
}

// uncoordinated logs and counts an operation that went ahead (write) or
// was held back (delete) because the coordinator could not be reached.
func (s *store) uncoordinated(ctx context.Context, op string, dgst digest.Digest, err error) {
	s.metrics.uncoordinated.WithLabelValues(op).Inc()
	log.G(ctx).WithError(err).WithField("digest", dgst).WithField("node", s.nodeID).WithField("op", op).
		Warn("coordinator unreachable")
}

// ReaderAt passes through: blobs are immutable and addressed by digest.
func (s *store) ReaderAt(ctx context.Context, desc ocispec.Descriptor) (content.ReaderAt, error) {
	return s.local.ReaderAt(ctx, desc)
}

// Walk passes through: it lists every blob in the shared directory.
func (s *store) Walk(ctx context.Context, fn content.WalkFunc, filters ...string) error {
	return s.local.Walk(ctx, fn, filters...)
}

// Update changes the blob's (node-local) labels under the update lock.
func (s *store) Update(ctx context.Context, info content.Info, fieldpaths ...string) (content.Info, error) {
	res, err := s.coord.Lock(ctx, lockclient.Request{Type: lockclient.OperationTypeUpdate, ResourceID: info.Digest.String(), NodeID: s.nodeID})
	switch {
	case err != nil && isCoordinationRefusal(err):
		return content.Info{}, fmt.Errorf("content %v: update: %w: %w", info.Digest, errdefs.ErrFailedPrecondition, err)
	case err != nil:
		s.uncoordinated(ctx, "update", info.Digest, err)
		return s.local.Update(ctx, info, fieldpaths...)
	}
	out, err := s.local.Update(ctx, info, fieldpaths...)
	if res.Lease != nil {
		if uerr := s.coord.Unlock(ctx, res.Lease, err == nil, err); uerr != nil {
			log.G(ctx).WithError(uerr).WithField("digest", info.Digest).Warn("update unlock failed")
		}
	}
	return out, err
}

// Delete removes the blob unless another node still uses it. It never
// returns an error for a blob kept for others or for an unreachable
// coordinator: containerd's garbage collector stops its whole sweep at the
// first Delete error.
func (s *store) Delete(ctx context.Context, dgst digest.Digest) error {
	if err := dgst.Validate(); err != nil {
		return fmt.Errorf("content %v: %w: %w", dgst, errdefs.ErrInvalidArgument, err)
	}
	// This node no longer uses the blob, whatever happens next.
	s.mu.Lock()
	delete(s.registered, dgst)
	delete(s.pending, dgst)
	s.mu.Unlock()

	var res *lockclient.LockResult
	err := s.coordinate(ctx, func(ctx context.Context) (err error) {
		res, err = s.coord.TryLock(ctx, lockclient.Request{Type: lockclient.OperationTypeDelete, ResourceID: dgst.String(), NodeID: s.nodeID})
		return err
	})
	l := log.G(ctx).WithField("digest", dgst).WithField("node", s.nodeID)
	switch {
	case errors.Is(err, lockclient.ErrInUse):
		s.metrics.deletes.WithLabelValues("in_use").Inc()
		l.Debug("blob kept: other nodes use it")
		return nil
	case errors.Is(err, lockclient.ErrLocked):
		s.metrics.deletes.WithLabelValues("locked").Inc()
		l.Debug("blob kept: a pull or delete of it is in flight; the next collection retries")
		return nil
	case err != nil:
		s.metrics.deletes.WithLabelValues("unreachable").Inc()
		s.uncoordinated(ctx, "delete", dgst, err)
		return nil
	case res.Skipped:
		s.metrics.deletes.WithLabelValues("skipped").Inc()
		return nil
	}
	derr := s.local.Delete(ctx, dgst)
	if errdefs.IsNotFound(derr) {
		derr = nil
	}
	if uerr := s.coord.Unlock(context.WithoutCancel(ctx), res.Lease, derr == nil, derr); uerr != nil {
		l.WithError(uerr).Warn("delete unlock failed")
	}
	if derr != nil {
		return derr
	}
	s.metrics.deletes.WithLabelValues("deleted").Inc()
	return nil
}

// isCoordinationRefusal reports whether err is the coordinator's answer
// (a protocol outcome) rather than a failure to reach it.
func isCoordinationRefusal(err error) bool {
	for _, e := range []error{lockclient.ErrInUse, lockclient.ErrLocked, lockclient.ErrDeleting,
		lockclient.ErrInvalidArgument, lockclient.ErrUnauthorized, lockclient.ErrNotHolder} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}
