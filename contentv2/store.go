package contentv2

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
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

	"github.com/sharedcontent/sharedcontent/internal/failpoint"
	"github.com/sharedcontent/sharedcontent/lockserver/api"
)

// Mode chooses how Writer behaves when another node holds a blob's lock.
type Mode int

const (
	// ContainerdMode (the plugin's default) never blocks in Writer: the
	// metadata store calls it inside a bolt write transaction. A blob that
	// another node is downloading gets a Follower, which waits in Status
	// (docs/design.md §5); one whose size is not given, or that another node has just
	// downloaded, is ErrUnavailable, which makes content.OpenWriter retry;
	// the retry finds the blob through Info and records it without
	// downloading.
	ContainerdMode Mode = iota
	// LibraryMode (direct Go use) waits in the lock queue and answers
	// ErrAlreadyExists when another node downloaded the blob meanwhile.
	LibraryMode
)

const (
	// DefaultRefRetryInterval is how long the store stops asking a
	// coordinator it found unreachable before it probes again, so that an
	// outage costs one timeout, not one per blob.
	DefaultRefRetryInterval = 5 * time.Second
	// DefaultCoordinationTimeout bounds one coordination call made while
	// containerd waits (Writer runs inside a metadata transaction).
	DefaultCoordinationTimeout = 2 * time.Second
	// deleteCheckTimeout bounds a deleter's last check of its lease: a
	// slower answer is no proof that the lease was still held when the
	// file is renamed (docs/design.md §8's margin covers this much).
	deleteCheckTimeout = time.Second
)

// Store is a content.Store on a shared directory. Close stops its
// background work; it does not close the coordinator.
type Store interface {
	content.Store
	// Reap runs one pass of the reaper now (docs/design.md §8.12), if no other node is
	// running one.
	Reap(ctx context.Context) (ReapReport, error)
	// Ready returns why the store refuses writes and deletes now (its
	// shared root is not verified: a *RootError), or nil.
	Ready() error
	Close() error
}

// Option configures NewStore.
type Option func(*store)

// WithMode sets the Writer behaviour (default ContainerdMode).
func WithMode(m Mode) Option { return func(s *store) { s.mode = m } }

// WithStateDir sets the node's local state directory, which holds its
// journal (docs/design.md §8.2). Required; it must be on this node's own disk, not on
// the shared storage.
func WithStateDir(dir string) Option { return func(s *store) { s.stateDir = dir } }

// WithHostID sets the fingerprint of the host the store runs on (default
// HostID(): its hardware's); a journal made on another host starts a new
// generation (docs/design.md §8.5). Tests give each simulated host its
// own.
func WithHostID(id string) Option { return func(s *store) { s.hostID = id } }

// WithRegisterer registers the store's metrics.
func WithRegisterer(r prometheus.Registerer) Option { return func(s *store) { s.registerer = r } }

// WithRefRetryInterval sets how long an unreachable coordinator is not
// asked again (default DefaultRefRetryInterval).
func WithRefRetryInterval(d time.Duration) Option { return func(s *store) { s.refRetry = d } }

// WithCoordinationTimeout bounds each coordination call that containerd
// waits on (default DefaultCoordinationTimeout).
func WithCoordinationTimeout(d time.Duration) Option { return func(s *store) { s.coordTimeout = d } }

// WithSessionTTL sets the session TTL the store counts with (default 15 s,
// the coordinator's default): it counts with the larger of this and the
// last TTL a coordinator announced to it (kept in the journal), so a node
// that cannot reach the coordinator waits FailOpenDelay of that before it
// uses blobs unreferenced.
func WithSessionTTL(d time.Duration) Option { return func(s *store) { s.configTTL = d } }

// WithReaper runs the reaper every interval (0: never), reclaiming what is
// older than grace (docs/design.md §8).
func WithReaper(interval, grace time.Duration) Option {
	return func(s *store) { s.reapInterval, s.reapGrace = interval, grace }
}

// WithRootProbe sets how long one probe of the shared root may take
// before the root counts as hung (default DefaultRootProbeTimeout). The
// root is probed at every session interval, and before every delete and
// reaper pass.
func WithRootProbe(timeout time.Duration) Option { return func(s *store) { s.rootProbe = timeout } }

// WithLocalStore replaces the local store on root (tests inject failures
// this way). It must be rooted in the shared directory.
func WithLocalStore(cs content.Store) Option { return func(s *store) { s.local = cs } }

// store implements Store.
type store struct {
	local        content.Store
	root         string
	stateDir     string
	nodeID       string
	coord        Coordinator
	journal      *journal
	mode         Mode
	registerer   prometheus.Registerer
	refRetry     time.Duration
	skipAddsRef  bool // WithSkipAddsRef
	coordTimeout time.Duration
	reapInterval time.Duration
	reapGrace    time.Duration
	reaper       reaperState
	metrics      *metrics
	// storageTimeout bounds each call on the root, and guard runs them
	// (deadline.go); reapStalls is the stalls the reaper has seen (only
	// Reap, under reaper.pass).
	storageTimeout time.Duration
	guard          *guard
	reapStalls     uint64
	rootProbe      time.Duration
	// rootw says whether the shared root is verified (rootwatch.go);
	// rootRecorded whether this node's state dir records it (rootid.go;
	// the session loop's only).
	rootw        *rootWatch
	rootRecorded bool
	// hostID is this host's fingerprint (hostid.go).
	hostID string
	// markerWritten: this node's marker is in the root (writeMarkerOnce);
	// only startSession and the session rounds touch it.
	markerWritten bool
	// startedAt, and markerSeq (the session loop's only), go into this
	// node's marker (marker.go).
	startedAt time.Time
	markerSeq uint64

	mu         sync.Mutex
	referenced map[digest.Digest]struct{} // protected by mu; refs the coordinator has (or will have at the next sync)
	followers  map[string]*follower       // protected by mu; by the caller's ref (follower.go)
	halfMade   map[string]bool            // protected by mu; this node's half-made ingests, by node-scoped ref (halfmade.go)
	// downUntil is when to ask the coordinator again after it was found
	// unreachable or slow; until then operations fail at once instead of
	// each waiting out a timeout. Protected by mu. slow: the mark was set
	// by a call that outlived the coordination timeout (the coordinator
	// is reachable but slow, coordinate): a session answer does not lift
	// it. Protected by mu.
	downUntil time.Time
	slow      bool
	// probeAt: while a slow mark holds, when one call may go through as
	// a probe (coordinate); probing: that call is in flight. Protected by
	// mu.
	probeAt time.Time
	probing bool

	// The session (session.go).
	smu       sync.Mutex
	clusterID string // protected by smu; the root's cluster ("" until known)
	configTTL time.Duration
	// sessionTTL is the TTL the coordinator announced last (0: none yet,
	// then configTTL). Protected by smu.
	sessionTTL time.Duration
	// answer is the last session answer received (its stamp, epoch, and
	// when it arrived, by the monotonic clock). Protected by smu.
	answer sessionAnswer
	// renewalSent is when the last renewal (or final sync chunk) was
	// sent, answered or not; fail-open counts from it. Protected by smu.
	renewalSent time.Time
	// failedOpen is when this node started using blobs without the
	// coordinator (zero: it has not since the last answer). Protected by
	// smu.
	failedOpen time.Time
	// duplicate: the coordinator refused the session because another
	// live instance uses this node ID; never fail open. Protected by smu.
	duplicate bool
	epoch     uint64 // protected by smu
	synced    bool   // protected by smu
	// restarted: the coordinator's epoch changed since the last answer,
	// and the sync it asks for waits until syncAt (syncdelay.go). Protected
	// by smu.
	restarted bool
	syncAt    time.Time
	// forgottenTold: a session answer said this node was forgotten
	// (NewMember) and it was handled (forgotten.go); the coordinator
	// says so in every answer until the node's sync completes, which are
	// the same news. Protected by smu.
	forgottenTold bool
	// instanceID is random per store start (docs/design.md §8.5); read-only.
	instanceID string
	kick       chan struct{} // a session round now
	// nextAnswer is closed at the next session answer (nosession.go).
	// Protected by smu.
	nextAnswer chan struct{}

	stop chan struct{} // closed by Close
	wg   sync.WaitGroup
	// unlocks are the pull locks being released in the background
	// (writer.releaseLater, and a release while the coordinator is marked
	// down: store.unlockLater); Close waits for them.
	unlocks sync.WaitGroup
}

// NewStore returns a Store for node nodeID over the shared content
// directory root, coordinated through coord. WithStateDir is required.
// Labels are kept per node in memory: containerd keeps its own labels in
// its metadata store.
//
// The root must pass CheckRoot (an error matching
// errdefs.ErrFailedPrecondition says what to fix). It records the node in
// the root and opens its session. A root that
// belongs to another cluster than the coordinator's is an error matching
// api.ErrWrongCluster (a *WrongClusterError saying what to do); an unreachable
// coordinator is not an error.
func NewStore(root, nodeID string, coord Coordinator, opts ...Option) (Store, error) {
	if nodeID == "" || strings.ContainsAny(nodeID, "/\x00") || nodeID == "." || nodeID == ".." {
		return nil, fmt.Errorf("node id %q: must be non-empty without '/': %w", nodeID, errdefs.ErrInvalidArgument)
	}
	if coord == nil {
		return nil, fmt.Errorf("coordinator is required: %w", errdefs.ErrInvalidArgument)
	}
	s := &store{
		root:         root,
		nodeID:       nodeID,
		coord:        coord,
		refRetry:     DefaultRefRetryInterval,
		coordTimeout: DefaultCoordinationTimeout,
		configTTL:    defaultSessionTTL,
		instanceID:   newID(),
		referenced:   map[digest.Digest]struct{}{},
		followers:    map[string]*follower{},
		kick:         make(chan struct{}, 1),
		nextAnswer:   make(chan struct{}),
		stop:         make(chan struct{}),
		startedAt:    time.Now().UTC(),
		rootProbe:    DefaultRootProbeTimeout,
		hostID:       HostID(),
	}
	for _, o := range opts {
		o(s)
	}
	if s.stateDir == "" {
		return nil, fmt.Errorf("a state directory for the node journal is required (WithStateDir): %w", errdefs.ErrInvalidArgument)
	}
	m, err := newMetrics(s.registerer)
	if err != nil {
		return nil, err
	}
	if s.storageTimeout == 0 {
		s.storageTimeout = DefaultStorageTimeout
	}
	if s.guard, err = newGuard(root, s.storageTimeout, s.registerer); err != nil {
		return nil, err
	}
	s.metrics = m
	if s.registerer != nil {
		if err := s.registerer.Register(newRootSpace(root)); err != nil {
			return nil, err
		}
	}
	if s.journal, err = openJournal(s.stateDir, s.hostID); err != nil {
		return nil, err
	}
	// Prove the root before anything is written to it (docs/design.md
	// §8.19); CheckRoot creates a missing root only for a first join.
	sr, err := verifyRootAtStart(root, s.stateDir, s.journal.memberOf())
	if err == nil {
		err = CheckRoot(root)
	}
	if err != nil {
		s.journal.close()
		return nil, err
	}
	// A probe is a call on the root too: no longer than any other
	// (docs/design.md §8.20).
	s.rootw = newRootWatch(root, min(s.rootProbe, s.storageTimeout), s.metrics, sr.expect, sr.mount)
	s.rootw.probeFn = func(root string, expect rootIdentity, mount bool) error {
		// Through the guard: a probe that hangs stalls the root like any
		// other call on it (docs/design.md §8.20).
		return s.guard.do(context.Background(), "root_probe", func() error { return probeRoot(root, expect, mount) })
	}
	s.guard.recovered = func() { _ = s.rootw.check(context.Background()) }
	s.rootRecorded = sr.record != nil
	if s.local == nil {
		cs, err := local.NewLabeledStore(root, newLabelStore())
		if err != nil {
			s.journal.close()
			return nil, err
		}
		s.local = cs
	}
	s.local = &guardedStore{cs: s.local, g: s.guard}
	if err := s.startSession(context.Background()); err != nil {
		s.journal.close()
		return nil, err
	}
	s.wg.Add(1)
	go s.rootLoop()
	s.wg.Add(1)
	go s.sessionLoop()
	if s.reapInterval > 0 {
		s.wg.Add(1)
		go s.reapLoop()
	}
	return s, nil
}

// defaultSessionTTL is the session TTL a store counts with unless
// configured (WithSessionTTL) or told a longer one by a coordinator.
const defaultSessionTTL = 15 * time.Second

func (s *store) Close() error {
	select {
	case <-s.stop:
		return nil
	default:
		close(s.stop)
	}
	s.wg.Wait()
	s.unlocks.Wait()
	s.endSession()
	return s.journal.close()
}

// Info returns the blob's info and records that this node uses it: a node
// asks for a blob it is about to use (containerd's metadata store does so
// before recording a shared blob). While a delete of the blob is in flight
// it answers ErrNotFound, so the caller downloads it again instead.
func (s *store) Info(ctx context.Context, dgst digest.Digest) (content.Info, error) {
	return s.use(ctx, dgst)
}

// use returns the info of a blob that exists and that this node now holds
// a reference to, so that no other node's delete removes it. A blob that
// is absent or being deleted is ErrNotFound; a coordinator that cannot be
// reached while this node may not fail open is ErrUnavailable (docs/design.md §8.8:
// reference before use).
func (s *store) use(ctx context.Context, dgst digest.Digest) (content.Info, error) {
	if err := s.rootw.readable(); err != nil {
		return content.Info{}, fmt.Errorf("content %v: %w", dgst, err)
	}
	info, err := s.local.Info(ctx, dgst)
	if err != nil {
		return info, err
	}
	s.mu.Lock()
	_, known := s.referenced[dgst]
	s.mu.Unlock()
	if known {
		// Referenced: no other node's delete can remove it.
		return info, nil
	}
	fresh := !s.journal.has(dgst) // not this node's own blob, nor one it used before
	if err := s.reference(ctx, dgst, true); err != nil {
		return content.Info{}, err
	}
	// A delete may have removed the blob between the first look and the
	// reference; once referenced, none can. Look again.
	info, err = s.local.Info(ctx, dgst)
	if err != nil {
		s.mu.Lock()
		delete(s.referenced, dgst)
		s.mu.Unlock()
		return info, err
	}
	if fresh {
		s.metrics.sharedBytes.Add(float64(info.Size))
	}
	return info, nil
}

// reference records this node as a user of dgst: in its journal, then with
// the coordinator (cached until this node deletes it). An unreachable
// coordinator is tolerated only as failOpenRefused allows (a member whose
// session has surely expired; the journal carries the use to the next
// sync); before that the error is ErrUnavailable, so the caller retries.
// A delete in flight is ErrNotFound, and so is, when the blob was found in
// the shared directory (found), a delete that succeeded since its last
// pull or reference: the lookup may have seen the deleted file through a
// filesystem cache.
func (s *store) reference(ctx context.Context, dgst digest.Digest, found bool) error {
	s.mu.Lock()
	_, done := s.referenced[dgst]
	s.mu.Unlock()
	if done {
		return nil
	}
	if err := s.journal.add(dgst); err != nil {
		return fmt.Errorf("content %v: %w: %w", dgst, errdefs.ErrUnavailable, err)
	}
	failpoint.Inject(failpoint.StoreRefAfterJournal)
	err := s.coordinate(ctx, func(ctx context.Context) error { return s.coord.AddRef(ctx, dgst, found) })
	if errors.Is(err, api.ErrNoSession) {
		err = s.afterSession(ctx, "ref", dgst, err, func(ctx context.Context) error { return s.coord.AddRef(ctx, dgst, found) })
	}
	switch {
	case err == nil:
		failpoint.Inject(failpoint.StoreRefAfterCoord)
	case errors.Is(err, api.ErrDeleting):
		if jerr := s.journal.remove(dgst); jerr != nil {
			log.G(ctx).WithError(jerr).Warn("node journal")
		}
		return fmt.Errorf("content %v: being deleted: %w", dgst, errdefs.ErrNotFound)
	case errors.Is(err, api.ErrNoSession):
		// An answer, not an outage: never a use without the reference.
		s.metrics.waits.Inc()
		return fmt.Errorf("content %v: cannot record this node's use: the coordinator holds no live session of this node yet; retry once it does: %w: %w",
			dgst, errdefs.ErrUnavailable, err)
	default:
		if rerr := s.failOpenRefused(err); rerr != nil {
			s.metrics.waits.Inc()
			return fmt.Errorf("content %v: cannot record this node's use: %w", dgst, rerr)
		}
		s.uncoordinated(ctx, "ref", dgst, err)
	}
	s.mu.Lock()
	s.referenced[dgst] = struct{}{}
	s.mu.Unlock()
	return nil
}

// errCoordinatorDown short-circuits calls while the coordinator is known
// to be unreachable.
var errCoordinatorDown = errors.New("coordinator unreachable recently; not asking again yet")

// coordinate runs one coordination call with the coordination timeout. A
// failure to reach the coordinator makes the next calls fail at once for
// refRetry, so an outage costs one timeout, not one per blob; the session
// loop probes meanwhile and lifts it when the coordinator answers.
//
// A call that outlives the coordination timeout (the coordinator is
// reachable, but slow: a storm of requests, a starved machine) marks it
// down for refRetry too, but neither kicks the session loop nor lets a
// session answer lift the mark (docs/design.md §10.6): sessions are served
// in a lane of their own and answer at once while new work waits, so a
// lift would send the node's retries of its locks and references straight
// back into the queue that timed them out, one round per session answer,
// and every node would turn one slow answer into a storm that feeds
// itself. Instead, a coordination timeout after the slow call, one call
// goes through as a probe (a circuit breaker's half-open state): answered,
// it lifts the mark, so one slow answer does not stall the node for
// refRetry; slow again, it sets the mark afresh. A node so sends at most
// one request at a time into a queue that timed it out.
func (s *store) coordinate(ctx context.Context, call func(context.Context) error) error {
	s.mu.Lock()
	now := time.Now()
	down := now.Before(s.downUntil)
	probe := down && s.slow && !s.probing && !now.Before(s.probeAt)
	s.probing = s.probing || probe
	s.mu.Unlock()
	if down && !probe {
		return errCoordinatorDown
	}
	cctx, cancel := context.WithTimeout(ctx, s.coordTimeout)
	defer cancel()
	err := call(cctx)
	failed := err != nil && !isRefusal(err) && !errors.Is(err, api.ErrNoSession) && ctx.Err() == nil
	if probe {
		s.mu.Lock()
		s.probing = false
		if !failed && ctx.Err() == nil {
			s.downUntil, s.slow = time.Time{}, false // it answered
		}
		s.mu.Unlock()
	}
	if errors.Is(err, api.ErrNoSession) {
		// It answered: the session is what is missing.
		s.kickSession()
		return err
	}
	if failed {
		// The coordination timeout ended it, and not between attempts
		// that never reached the coordinator (a client's retries of a
		// refused or reset connection): that one is unreachable.
		slow := cctx.Err() != nil && !unreached(err)
		s.mu.Lock()
		now := time.Now()
		s.downUntil, s.slow, s.probeAt = now.Add(s.refRetry), slow, now.Add(s.coordTimeout)
		s.mu.Unlock()
		if !slow {
			s.kickSession()
		}
	}
	return err
}

// unreached reports whether err's last attempt failed on the connection
// (refused, reset, no route) rather than waiting for an answer.
func unreached(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && !op.Timeout()
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
	if err := s.rootw.readable(); err != nil {
		return nil, fmt.Errorf("content %v: %w", desc.Digest, err)
	}
	return s.local.ReaderAt(ctx, desc)
}

// Walk passes through: it lists every blob in the shared directory.
func (s *store) Walk(ctx context.Context, fn content.WalkFunc, filters ...string) error {
	if err := s.rootw.readable(); err != nil {
		return err
	}
	return s.local.Walk(ctx, fn, filters...)
}

// Update changes the blob's (node-local) labels under the update lock.
func (s *store) Update(ctx context.Context, info content.Info, fieldpaths ...string) (content.Info, error) {
	if err := s.rootw.ready(); err != nil {
		return content.Info{}, fmt.Errorf("content %v: update: %w", info.Digest, err)
	}
	lk, err := s.coord.Lock(ctx, api.LockRequest{Type: api.OperationUpdate, ResourceID: info.Digest.String(), Wait: new(false)})
	switch {
	case err != nil && isRefusal(err):
		return content.Info{}, fmt.Errorf("content %v: update: %w: %w", info.Digest, errdefs.ErrFailedPrecondition, err)
	case err != nil:
		s.uncoordinated(ctx, "update", info.Digest, err)
		return s.local.Update(ctx, info, fieldpaths...)
	}
	out, err := s.local.Update(ctx, info, fieldpaths...)
	if uerr := lk.Unlock(ctx, err == nil, err); uerr != nil {
		log.G(ctx).WithError(uerr).WithField("digest", info.Digest).Warn("update unlock failed")
	}
	return out, err
}

// Delete removes the blob unless another node still uses it or a member
// node is not synced (docs/design.md §8.7). It never returns an error for a blob kept
// or for an unreachable coordinator: containerd's garbage collector stops
// its whole sweep at the first Delete error. It does return one, a
// *RootError (errdefs.ErrUnavailable), when a probe of the shared root
// right before fails (docs/design.md §8.19): then the sweep should stop.
//
// The file is removed only under the delete lock, checked to be still
// held right before: it is renamed into <root>/.trash (atomic, reversible),
// the lock released with success, and the trash entry unlinked only once
// the coordinator has answered that unlock; on any failure of it the blob
// is put back (docs/design.md §8.11). A pull that commits the same digest
// again meanwhile keeps its new file.
func (s *store) Delete(ctx context.Context, dgst digest.Digest) error {
	if err := dgst.Validate(); err != nil {
		return fmt.Errorf("content %v: %w: %w", dgst, errdefs.ErrInvalidArgument, err)
	}
	if err := s.keptWhileStalled(ctx, dgst); err != nil {
		s.dropOwnRef(ctx, dgst, err)
		return nil
	}
	if err := s.rootw.check(ctx); err != nil {
		s.metrics.deletes.WithLabelValues("root_unready").Inc()
		s.dropOwnRef(ctx, dgst, err)
		return fmt.Errorf("content %v: delete refused: %w", dgst, err)
	}
	lk, err := s.deleteLock(ctx, dgst)
	l := log.G(ctx).WithField("digest", dgst).WithField("node", s.nodeID)
	if err == nil {
		failpoint.Inject(failpoint.StoreDeleteAfterJournal)
	}
	switch {
	case errors.Is(err, api.ErrInUse):
		s.metrics.deletes.WithLabelValues("in_use").Inc()
		l.Debug("blob kept: other nodes use it")
		return nil
	case errors.Is(err, api.ErrUnsynced):
		s.metrics.deletes.WithLabelValues("unsynced").Inc()
		l.WithError(err).Info("blob kept: a member node is not synced; a later collection (or the reaper) retries")
		return nil
	case errors.Is(err, api.ErrLocked):
		s.metrics.deletes.WithLabelValues("locked").Inc()
		l.Debug("blob kept: a pull or delete of it is in flight; the next collection retries")
		return nil
	case errors.Is(err, api.ErrSkipped):
		s.metrics.deletes.WithLabelValues("skipped").Inc()
		return nil
	case err != nil:
		s.metrics.deletes.WithLabelValues("unreachable").Inc()
		s.uncoordinated(ctx, "delete", dgst, err)
		return nil
	}
	return s.removeLocked(ctx, dgst, lk)
}

// askDelete asks for dgst's delete lock, a delete of this node's own (no
// reap mode): asking drops this node's reference at the coordinator,
// granted or refused (the delete rule, docs/design.md §8.7), so the node
// no longer counts the blob as referenced, whatever happens next.
func (s *store) askDelete(ctx context.Context, dgst digest.Digest) (Lock, error) {
	s.mu.Lock()
	delete(s.referenced, dgst)
	s.mu.Unlock()
	var lk Lock
	err := s.coordinate(ctx, func(ctx context.Context) (err error) {
		lk, err = s.coord.Lock(ctx, api.LockRequest{Type: api.OperationDelete, ResourceID: dgst.String(), Wait: new(false)})
		return err
	})
	return lk, err
}

// deleteLock is askDelete for a delete: granted or refused, the journal
// drops the reference too; an unreachable coordinator drops nothing, and
// the journal keeps it for the next sync.
func (s *store) deleteLock(ctx context.Context, dgst digest.Digest) (Lock, error) {
	lk, err := s.askDelete(ctx, dgst)
	if err == nil {
		failpoint.Inject(failpoint.StoreDeleteGranted)
	}
	if err == nil || isRefusal(err) {
		if jerr := s.journal.remove(dgst); jerr != nil {
			log.G(ctx).WithError(jerr).WithField("digest", dgst).WithField("node", s.nodeID).Warn("node journal")
		}
	}
	return lk, err
}

// dropOwnRef drops this node's reference to dgst, and nothing else, for
// a Delete the shared root refused (why): containerd calls Delete only
// for a blob its metadata no longer holds, so the node no longer uses
// it, whatever its root shows. The blob's file is left alone: a
// reaper whose root checks out reclaims it once nobody references it
// (docs/design.md §8.12). Otherwise the reference would stay until this
// node's containerd deleted the blob again, which it does only at a later
// content collection (one that removes some other content or ingest), and
// never on an idle node: the blob would never be reclaimed. A grant of
// the delete lock, which asking drops the reference with, is given back
// at once as failed.
func (s *store) dropOwnRef(ctx context.Context, dgst digest.Digest, why error) {
	s.mu.Lock()
	_, cached := s.referenced[dgst]
	s.mu.Unlock()
	if !cached && !s.journal.has(dgst) {
		return // no reference of this node to drop
	}
	ctx = context.WithoutCancel(ctx)
	l := log.G(ctx).WithField("digest", dgst).WithField("node", s.nodeID)
	lk, err := s.deleteLock(ctx, dgst)
	switch {
	case err == nil:
		if uerr := lk.Unlock(ctx, false, why); uerr != nil {
			l.WithError(uerr).Debug("giving back a delete lock taken only to drop this node's reference")
		}
	case !isRefusal(err):
		l.WithError(err).Warn("the shared root refused a delete, and the coordinator could not be reached to drop this node's reference; the next sync keeps it")
		return
	}
	s.metrics.deletes.WithLabelValues("ref_dropped").Inc()
	l.WithError(why).Info("delete refused by the shared root: this node's reference is dropped, the blob left for a reaper whose root checks out")
}

// removeLocked removes the blob under its delete lock lk and releases it.
func (s *store) removeLocked(ctx context.Context, dgst digest.Digest, lk Lock) error {
	l := log.G(ctx).WithField("digest", dgst).WithField("node", s.nodeID)
	ctx = context.WithoutCancel(ctx)
	cctx, cancel := context.WithTimeout(ctx, deleteCheckTimeout)
	err := lk.Check(cctx)
	cancel()
	if err != nil {
		s.metrics.deletes.WithLabelValues("revoked").Inc()
		l.WithError(err).Info("blob kept: the delete lock was not confirmed right before the removal")
		if uerr := lk.Unlock(ctx, false, err); uerr != nil {
			l.WithError(uerr).Debug("delete unlock after a failed check")
		}
		return nil
	}
	failpoint.Inject(failpoint.StoreDeleteAfterCheck)
	trashed, derr := s.moveToTrashBounded(ctx, dgst, lk.Fence())
	failpoint.Inject(failpoint.StoreDeleteAfterTrash)
	uerr := lk.Unlock(ctx, derr == nil, derr)
	failpoint.Inject(failpoint.StoreDeleteAfterUnlock)
	if derr != nil {
		if uerr != nil {
			l.WithError(uerr).Debug("delete unlock after a failed rename")
		}
		if s.keptWhileStalled(ctx, dgst) != nil {
			return nil // the lock request dropped this node's reference
		}
		return fmt.Errorf("content %v: %w", dgst, derr)
	}
	if uerr != nil && trashed != "" && s.deleteCommitted(ctx, dgst, lk.Fence()) {
		// The answer was lost (the coordinator restarted or failed over
		// after committing), but the coordinator shows this delete, or a
		// later one, committed and nothing referenced the blob since.
		l.WithError(uerr).Info("the delete's unlock was not answered, but the coordinator committed it")
		uerr = nil
	}
	if uerr != nil {
		// Refused, fenced, unreachable or timed out: the coordinator may
		// not have dropped the references, so the one irreversible step
		// is not taken (docs/design.md §8.11).
		s.metrics.deletes.WithLabelValues("restored").Inc()
		if trashed == "" {
			l.WithError(uerr).Info("blob kept: the delete was not confirmed (the blob was already gone)")
			return nil
		}
		put, err := restoreTrashed(s.root, trashed, dgst)
		if err != nil {
			l.WithError(err).WithField("unlock_error", uerr).Warn("blob in the trash: the delete was not confirmed and putting it back failed; the reaper restores it")
			return nil
		}
		l.WithError(uerr).WithField("put_back", put).Info("blob kept: the delete was not confirmed; the blob is back in place")
		return nil
	}
	// The coordinator committed the drop of the references, the marker
	// and the completion: only now is the blob removed for good.
	if trashed != "" {
		if err := os.Remove(trashed); err != nil {
			l.WithError(err).Warn("unlinking a trashed blob; the reaper settles it later")
		}
	}
	failpoint.Inject(failpoint.StoreDeleteAfterUnlink)
	s.metrics.deletes.WithLabelValues("deleted").Inc()
	return nil
}

// deleteCommitted asks the coordinator whether a delete of dgst with a
// fence of at least fence succeeded and nothing referenced the blob since
// (the rule the reaper settles trash entries by). Any failure to ask is
// false: the blob is put back.
func (s *store) deleteCommitted(ctx context.Context, dgst digest.Digest, fence uint64) bool {
	cctx, cancel := context.WithTimeout(ctx, deleteCheckTimeout)
	defer cancel()
	c, err := s.coord.DeleteCompletion(cctx, dgst)
	return err == nil && c.Succeeded(fence)
}

// blobPath is where the local store keeps dgst.
func (s *store) blobPath(dgst digest.Digest) string {
	return filepath.Join(s.root, "blobs", dgst.Algorithm().String(), dgst.Encoded())
}
