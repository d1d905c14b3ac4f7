package lockserver

import (
	"context"
	"fmt"
	"runtime"
	"time"

	"github.com/containerd/log"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sharedcontent/sharedcontent/lockserver/api"
)

// Bounds on syncs (docs/design.md §10.4): session calls never
// wait for a sync slot, syncs beyond MaxSyncs at once are answered 429
// with Retry-After, the resource IDs that unfinished syncs buffer are
// bounded cluster-wide (MaxSyncBuffer), and an unfinished sync that sends
// nothing for SyncTimeout is dropped with its buffer.

const (
	// DefaultSyncBuffer bounds the resource IDs that every unfinished
	// sync together buffers: 4M, about 500 MB at most, four times the
	// largest full sync of a node with 1M references.
	DefaultSyncBuffer = 1 << 22
	// DefaultSyncTimeout is how long an unfinished sync may send nothing
	// before its buffer is dropped; the node then starts it again.
	DefaultSyncTimeout = 2 * time.Minute
	// syncRetryAfter is the Retry-After of a refused sync.
	syncRetryAfter = time.Second
)

// DefaultMaxSyncs is the default number of sync requests the coordinator
// serves at once: two per CPU, at least 4.
func DefaultMaxSyncs() int { return max(4, 2*runtime.GOMAXPROCS(0)) }

// BusyError is a refusal of a busy coordinator: retry after RetryAfter. It
// matches api.ErrTooManyRequests (429; the HTTP side sends RetryAfter as
// the Retry-After header).
type BusyError struct {
	Reason     string
	RetryAfter time.Duration
}

func (e *BusyError) Error() string {
	return fmt.Sprintf("%s; retry in %s: %s", e.Reason, e.RetryAfter, api.ErrTooManyRequests)
}

// Unwrap makes errors.Is(err, api.ErrTooManyRequests) true.
func (e *BusyError) Unwrap() error { return api.ErrTooManyRequests }

// syncMetrics are the series of syncs.
type syncMetrics struct {
	// syncs counts completed syncs by mode: full, hash (the whole hash was
	// equal: nothing written), buckets (only differing buckets replaced).
	syncs *prometheus.CounterVec
	// refused counts sync requests answered 429, by reason (busy, buffer).
	refused *prometheus.CounterVec
	// dropped counts unfinished syncs dropped, by reason (timeout).
	dropped *prometheus.CounterVec
	// buffered is the resource IDs unfinished syncs hold.
	buffered prometheus.Gauge
}

func newSyncMetrics(reg prometheus.Registerer) (*syncMetrics, error) {
	m := &syncMetrics{
		syncs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sharedcontent_syncs_total",
			Help: "Syncs completed, by mode: full (the whole journal), hash (the node's hash equalled the coordinator's record: nothing written), buckets (only the differing buckets were sent and replaced).",
		}, []string{"mode"}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sharedcontent_sync_refusals_total",
			Help: "Sync requests answered 429 with Retry-After, by reason: busy (max-syncs requests being served), buffer (the unfinished syncs' buffers are full: max-sync-buffer).",
		}, []string{"reason"}),
		dropped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sharedcontent_syncs_dropped_total",
			Help: "Unfinished syncs dropped with their buffer, by reason: timeout (nothing sent for sync-timeout).",
		}, []string{"reason"}),
		buffered: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sharedcontent_sync_buffer_refs",
			Help: "Resource IDs buffered by unfinished syncs, over every node (bounded by max-sync-buffer).",
		}),
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.syncs, m.refused, m.dropped, m.buffered} {
			if err := reg.Register(c); err != nil {
				return nil, err
			}
		}
	}
	return m, nil
}

// syncLimits is the coordinator's sync admission and buffer accounting.
type syncLimits struct {
	// slots admits MaxSyncs sync requests at once.
	slots chan struct{}
	// buffered counts the resource IDs of every unfinished sync;
	// protected by memberPart.mmu.
	buffered int
	// active are the members with an unfinished sync; protected by mmu.
	active map[*member]struct{}
	// writing are the members whose sync is being written (syncwrite.go);
	// protected by mmu.
	writing map[*member]struct{}
	// writeHook, when set (by tests), is called without mmu before a
	// sync's replace ("replace") and after it ("replaced").
	writeHook func(node, stage string)
}

func newSyncLimits(cfg Config) *syncLimits {
	return &syncLimits{slots: make(chan struct{}, cfg.MaxSyncs), active: map[*member]struct{}{}, writing: map[*member]struct{}{}}
}

// admitSync takes a sync slot, or refuses the request at once: a sync
// never queues (a queued one would hold a connection and time out on the
// node), and session calls take no slot.
func (sy *syncs) admitSync(node string) (release func(), err error) {
	select {
	case sy.syncLimits.slots <- struct{}{}:
		return func() { <-sy.syncLimits.slots }, nil
	default:
		sy.syncMetrics.refused.WithLabelValues("busy").Inc()
		return nil, &BusyError{Reason: fmt.Sprintf("sync of node %s: %d syncs are being served (max-syncs)", node, cap(sy.syncLimits.slots)),
			RetryAfter: syncRetryAfter}
	}
}

// startSync makes s m's unfinished sync, dropping the one m had. Callers
// hold mmu.
func (sy *syncs) startSync(m *member, s *nodeSync) {
	sy.endSync(m)
	m.sync = s
	sy.syncLimits.active[m] = struct{}{}
}

// noteChange tells m's sync in progress, if any, that m itself added (or
// removed) a reference to resourceID after the sync began, so that the
// sync's replacement keeps the change (nodeSync.since). Callers hold mmu.
func (sy *syncs) noteChange(m *member, resourceID string, added bool) {
	if m.sync != nil {
		m.sync.since[resourceID] = added
	}
}

// endSync drops m's unfinished sync, if any, and its buffer. Callers hold
// mmu.
func (sy *syncs) endSync(m *member) {
	if m.sync == nil {
		return
	}
	sy.syncLimits.buffered -= len(m.sync.refs)
	sy.syncMetrics.buffered.Set(float64(sy.syncLimits.buffered))
	delete(sy.syncLimits.active, m)
	m.sync = nil
}

// bufferSync adds ids to s, m's sync, within the cluster-wide bound: a
// chunk that would pass it drops the syncs that timed out first, and is
// refused (429, nothing buffered) if that is not enough; the node sends
// the same chunk again later, so the sync resumes where it was. Callers
// hold mmu.
func (sy *syncs) bufferSync(ctx context.Context, m *member, ids []string, now time.Time) error {
	s := m.sync
	s.touched = now // the node is sending: its own sync is not stale
	if sy.syncLimits.buffered+len(ids) > sy.cfg.MaxSyncBuffer {
		sy.dropStaleSyncs(ctx, now)
	}
	if sy.syncLimits.buffered+len(ids) > sy.cfg.MaxSyncBuffer {
		sy.syncMetrics.refused.WithLabelValues("buffer").Inc()
		return &BusyError{Reason: fmt.Sprintf("sync of node %s: unfinished syncs buffer %d resource IDs, %d more would pass max-sync-buffer (%d)",
			m.rec.ID, sy.syncLimits.buffered, len(ids), sy.cfg.MaxSyncBuffer), RetryAfter: syncRetryAfter}
	}
	before := len(s.refs)
	for _, id := range ids {
		if _, ok := s.refs[id]; !ok {
			s.refs[id] = struct{}{}
			s.addToSum(id)
		}
	}
	sy.syncLimits.buffered += len(s.refs) - before
	sy.syncMetrics.buffered.Set(float64(sy.syncLimits.buffered))
	return nil
}

// dropStaleSyncs drops every unfinished sync that has sent nothing for
// SyncTimeout. Callers hold mmu.
func (sy *syncs) dropStaleSyncs(ctx context.Context, now time.Time) {
	for m := range sy.syncLimits.active {
		if !m.sync.writing && now.Sub(m.sync.touched) >= sy.cfg.SyncTimeout {
			log.G(ctx).WithField("node", m.rec.ID).WithField("refs", len(m.sync.refs)).WithField("idle", now.Sub(m.sync.touched)).
				Warn("unfinished sync dropped: nothing sent for sync-timeout; the node starts it again")
			sy.syncMetrics.dropped.WithLabelValues("timeout").Inc()
			sy.endSync(m)
		}
	}
}

// syncSweepLoop drops timed-out syncs every SyncTimeout/4 until Close.
func (c *Coordinator) syncSweepLoop() {
	defer c.wg.Done()
	t := time.NewTicker(max(c.cfg.SyncTimeout/4, 10*time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-c.stop:
			return
		case <-t.C:
			c.mmu.Lock()
			c.syncs.dropStaleSyncs(context.Background(), c.now())
			c.mmu.Unlock()
		}
	}
}

// checkChunkOffset checks the offset of a chunk of the known sync s: the
// resource IDs the sync has received before it, or, for a retry of the
// last chunk (its answer was lost), what it had received before that
// one. Anything else is a chunk out of place (lost, reordered, or
// made up: a done at offset 999999 after 5 IDs) and is refused as an
// invalid argument that changes nothing; the node starts its sync again.
// A chunk without an offset (an older node) is not checked.
func checkChunkOffset(node string, s *nodeSync, req api.SyncRequest) (retry bool, err error) {
	if req.Offset == nil {
		return false, nil
	}
	switch o := *req.Offset; {
	case o == s.sent:
		return false, nil
	case o == s.last && o+len(req.ResourceIDs) == s.sent:
		return true, nil
	default:
		return false, fmt.Errorf("sync %s of node %s: chunk at offset %d, but the sync has received %d resource IDs: nothing changed; start the sync again: %w",
			req.SyncID, node, o, s.sent, api.ErrInvalidArgument)
	}
}
