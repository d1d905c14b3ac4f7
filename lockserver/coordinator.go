package lockserver

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"sync"
	"time"

	"github.com/containerd/log"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sharedcontent/sharedcontent/lockserver/api"
	"github.com/sharedcontent/sharedcontent/refcount"
)

// Coordinator is the coordinator's in-process API: the lock manager of
// docs/design.md §3. All methods are safe for concurrent use. It is a thin
// front over parts that each own their state and their mutexes
// (docs/design.md §3.11): the locks part (locks.go: shards, queues,
// leases, fences, streams), the references part (references.go:
// reference sets, the delete rule, deletes remembered, the reaper's rules),
// the members (memberpart.go: sessions, expiry, identity) and their syncs
// (syncs.go). The parts talk through the narrow interfaces of seams.go.
type Coordinator struct {
	cfg   Config
	refs  *refcount.Manager
	state refcount.Storage // the Manager's storage; written only through it
	store *store           // every part's writes (state_store.go)
	// locks is the locks part; references the references part.
	locks      *locks
	references *references
	// memberPart: the members, their sessions, and the cluster's
	// identity (memberpart.go); syncs: their syncs (syncs.go), which
	// the members part sees as a syncsView.
	*memberPart
	syncs *syncs

	metrics *metrics
	now     func() time.Time
	// started is when this Coordinator started (monotonic, by now): session
	// answers are stamped with the uptime since, and members' absence
	// counts from here at the earliest (members.go).
	started time.Time

	stop chan struct{} // closed by Close; stops the sweepers
	wg   sync.WaitGroup
}

// Options are the collaborators of a Coordinator.
type Options struct {
	// Refs holds the reference sets. Required. Its storage holds the
	// rest of the coordinator's durable state too (the fence high-water
	// mark, the identity, the members and the deletes), so that one
	// transaction can change them together. On a memory storage, fences
	// restart from 1 and every Coordinator is a new cluster.
	Refs *refcount.Manager
	// Registerer receives the Prometheus metrics. Nil registers nowhere.
	Registerer prometheus.Registerer
	// Now is the Coordinator's clock; nil: time.Now. Tests move it.
	Now func() time.Time
}

// NewCoordinator starts a Coordinator and its per-shard sweepers. Call Close to stop
// them.
func NewCoordinator(cfg Config, opts Options) (*Coordinator, error) {
	now := opts.Now
	if now == nil {
		now = time.Now
	}
	return newCoordinator(cfg, opts, now)
}

// newCoordinator is NewCoordinator on the clock now (tests move it).
func newCoordinator(cfg Config, opts Options, now func() time.Time) (*Coordinator, error) {
	cfg = cfg.withSyncDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("lockserver config: %w: %w", api.ErrInvalidArgument, err)
	}
	if opts.Refs == nil {
		return nil, fmt.Errorf("lockserver: refcount manager is required: %w", api.ErrInvalidArgument)
	}
	m, err := newMetrics(opts.Registerer)
	if err != nil {
		return nil, err
	}
	st := &store{refs: opts.Refs, state: opts.Refs.Storage(), metrics: m}
	c := &Coordinator{
		cfg:     cfg,
		refs:    opts.Refs,
		state:   st.state,
		store:   st,
		metrics: m,
		now:     now,
		started: now(),
		stop:    make(chan struct{}),
	}
	// The parts read the Coordinator's clock, which tests move.
	clock := func() time.Time { return c.now() }
	timing := &timingRule{started: c.started, ttl: cfg.SessionTTL, metrics: m}
	c.memberPart = &memberPart{cfg: cfg, refs: opts.Refs, state: st.state, metrics: m, now: clock, timing: timing,
		commit: st.commit, members: map[string]*member{}}
	timing.cluster = &c.memberPart.cluster
	sm, err := newSyncMetrics(opts.Registerer)
	if err != nil {
		return nil, err
	}
	c.syncs = &syncs{cfg: cfg, refs: opts.Refs, commit: st.commit, now: clock, timing: timing, mp: c.memberPart,
		syncLimits: newSyncLimits(cfg), syncMetrics: sm, sliceRefs: refcount.SliceRefs}
	c.syncs.share = newSyncShare(cfg, st.commit, c.syncs.commitSlices)
	c.memberPart.syncs = c.syncs
	ctx := context.Background()
	st.now = clock
	c.references = newReferences(cfg, st, c.memberPart, clock, c.started)
	if c.references.pins, err = newPinSet(opts.Registerer); err != nil {
		return nil, err
	}
	if c.locks, err = newLocks(ctx, cfg, st, c.references, clock, c.stop); err != nil {
		return nil, err
	}
	c.references.locks = c.locks
	if err := c.startEpoch(ctx); err != nil {
		return nil, err
	}
	if err := c.loadMembers(ctx); err != nil {
		return nil, err
	}
	if err := c.references.loadPins(ctx); err != nil {
		return nil, err
	}
	// The members' hashes for syncs by hash: one walk of the references,
	// or a standby's (docs/design.md §7.2).
	if err := c.buildHashes(ctx); err != nil {
		return nil, err
	}
	// The start grace counts from here: loading the state (a walk of
	// every reference, on a standby that takes over without its warm
	// hashes) may take longer than a TTL (docs/design.md §10.7).
	c.mmu.Lock()
	c.serving = now()
	c.mmu.Unlock()
	if err := c.locks.start(ctx, &c.wg); err != nil {
		return nil, err
	}
	c.wg.Add(2)
	go c.syncSweepLoop()
	go c.pinSweepLoop()
	return c, nil
}

// buildHashes gets the members' hashes (refcount.Manager.BuildHashes),
// counts how and logs it.
func (c *Coordinator) buildHashes(ctx context.Context) error {
	start := time.Now()
	if err := c.refs.BuildHashes(ctx); err != nil {
		return fmt.Errorf("lockserver: hashing the references: %w", err)
	}
	how, warmErr := c.refs.HashesBuilt()
	c.metrics.hashesBuilt.WithLabelValues(how).Inc()
	entry := log.L.WithField("how", how).WithField("seconds", time.Since(start).Seconds())
	if warmErr != nil {
		entry.WithError(warmErr).Warn("the standby's reference hashes were not usable: walked every reference")
		return nil
	}
	entry.Debug("the members' reference hashes are built")
	return nil
}

// Config returns the configuration the Coordinator runs with.
func (c *Coordinator) Config() Config { return c.cfg }

// Close stops the sweepers and ends every event subscription. The update
// leases held are recorded for the next coordinator on the store (pull
// leases are already); queues are dropped with the Coordinator, and
// unlocks are refused from the start of Close.
func (c *Coordinator) Close() error {
	select {
	case <-c.stop:
		return nil
	default:
	}
	c.locks.closing.Store(true)
	close(c.stop)
	c.wg.Wait()
	if err := c.locks.saveLeases(context.Background()); err != nil {
		log.L.WithError(err).Warn("the update leases held are not recorded; their holders' unlocks fail at the next coordinator")
	}
	if err := c.flushSeen(context.Background()); err != nil {
		log.L.WithError(err).Warn("the members' last session times are not saved; GET /nodes shows older ones after the restart")
	}
	c.locks.close()
	return nil
}

// Lock handles POST /lock (docs/design.md §3.3). It never blocks on other
// holders: it answers acquired, skip, queued, or an error matching
// api.ErrInUse or api.ErrLocked. A queued caller learns of its turn through
// Subscribe or Status.
func (c *Coordinator) Lock(ctx context.Context, req api.LockRequest) (api.LockResponse, error) {
	resp, err := c.locks.Lock(ctx, req)
	return c.skipAddsRef(ctx, req, resp, err)
}

// Acquire is the blocking form of Lock for in-process callers (the
// embedded coordinator): it waits in the queue until the request is
// granted or skipped, or fails. Cancelling ctx takes the request out of the
// queue, or gives back a grant made meanwhile.
func (c *Coordinator) Acquire(ctx context.Context, req api.LockRequest) (api.LockResponse, error) {
	resp, err := c.locks.Acquire(ctx, req)
	return c.skipAddsRef(ctx, req, resp, err)
}

// Unlock handles POST /unlock (docs/design.md §3.4). Only the holder of the
// lease may release; a retry of a release that already happened, with the
// same outcome, succeeds again.
func (c *Coordinator) Unlock(ctx context.Context, req api.UnlockRequest) (api.UnlockResponse, error) {
	return c.locks.Unlock(ctx, req)
}

// Keepalive handles POST /lock/keepalive: it renews the holder's lease.
func (c *Coordinator) Keepalive(ctx context.Context, req api.KeepaliveRequest) (api.KeepaliveResponse, error) {
	return c.locks.Keepalive(ctx, req)
}

// Cancel handles POST /lock/cancel: the request leaves its queue, or gives
// back the grant it received (as a failure, so the queue advances).
// Cancelling an unknown request is not an error.
func (c *Coordinator) Cancel(ctx context.Context, req api.CancelRequest) error {
	return c.locks.Cancel(ctx, req)
}

// Subscribe opens an event stream for (typ, resourceID), following the
// request (nodeID, requestID) when requestID is not empty. The caller must
// Close it.
func (c *Coordinator) Subscribe(typ api.OperationType, resourceID, nodeID, requestID string) (*Subscription, error) {
	return c.locks.Subscribe(typ, resourceID, nodeID, requestID)
}

// Status handles GET /lock/status. Naming a request_id also reports that
// request's own state, counts as a poll that keeps a stream-less waiter in
// its queue, and claims a grant made to it.
// It never blocks; ctx is there for the Transport interface of lockclient.
func (c *Coordinator) Status(ctx context.Context, typ api.OperationType, resourceID, nodeID, requestID string) (api.StatusResponse, error) {
	return c.locks.Status(ctx, typ, resourceID, nodeID, requestID)
}

// Held handles GET /locks/held (admin): the locks of one type held now
// (pull, the default: the in-flight downloads) and their waiters
// (held.go).
func (c *Coordinator) Held(ctx context.Context, typ api.OperationType) (api.HeldLocksResponse, error) {
	return c.locks.Held(ctx, typ)
}

// OpenNodeStream opens the event stream of node, ending the node's older
// one if any. The caller must Close it.
func (c *Coordinator) OpenNodeStream(node string) (*NodeStream, error) {
	return c.locks.OpenNodeStream(node)
}

// NodeStreams counts the node streams open now.
func (c *Coordinator) NodeStreams() int { return c.locks.streams.count() }

// AddRef handles POST /refs/add: it records that node uses the resource
// (for example a blob it is about to commit). It is refused with
// api.ErrDeleting while a delete of the resource is in flight, because that
// delete already decided nobody uses it, and with api.ErrNoSession unless
// the node holds a live session (the reference rule, refrule.go). The answer has the set's Count,
// not its Nodes (api.RefsAddRequest.CountOnly; GET /refs has them).
func (c *Coordinator) AddRef(ctx context.Context, resourceID, nodeID string) (api.RefsResponse, error) {
	return c.references.addRef(ctx, resourceID, nodeID, false)
}

// AddFoundRef is AddRef for a blob the node found present (POST /refs/add
// with found): it is refused with api.ErrDeleting also once a delete of
// the resource has succeeded and no pull or reference has followed it
// (for CompletedTTL), because the node may have seen the deleted file
// through a cache of the shared filesystem.
func (c *Coordinator) AddFoundRef(ctx context.Context, resourceID, nodeID string) (api.RefsResponse, error) {
	return c.references.addRef(ctx, resourceID, nodeID, true)
}

// Refs handles GET /refs: the nodes that reference the resource. It reads
// with the resource held still, so it never sees an unlock half done
// (waiters told to skip, the holder's reference still being written).
func (c *Coordinator) Refs(ctx context.Context, resourceID string) (api.RefsResponse, error) {
	return c.references.Refs(ctx, resourceID)
}

// RefsList handles GET /refs/list: the reference sets in resource ID order,
// a page at a time (for the reaper and operators).
func (c *Coordinator) RefsList(ctx context.Context, after string, limit int) (api.RefsListResponse, error) {
	return c.references.RefsList(ctx, after, limit)
}

// SyncRefs handles PUT /nodes/{id}/refs: one step of the node's sync
// (sync.go). At most MaxSyncs requests are served at once; more are
// refused with a BusyError (429), as is a chunk past the cluster-wide
// buffer bound and any step of another sync of a node whose sync is being
// written; a retry of the sync being written waits for it.
func (c *Coordinator) SyncRefs(ctx context.Context, nodeID string, req api.SyncRequest) (api.SyncResponse, error) {
	return c.syncs.SyncRefs(ctx, nodeID, req)
}

// Nodes returns every member and its state: the whole of GET /nodes
// (members.go's NodesPage).
func (c *Coordinator) Nodes(ctx context.Context) (api.NodesResponse, error) {
	return c.memberPart.NodesPage(ctx, "", 0)
}

// newID returns an unguessable identifier (128 random bits).
func newID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
