package scale

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/opencontainers/go-digest"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sharedcontent/sharedcontent/contentv2"
	"github.com/sharedcontent/sharedcontent/lockserver/api"
)

// A rollout's node is contentv2 itself (docs/design.md §10.6): a
// contentv2 store per simulated node, in ContainerdMode with the
// product's deadlines (contentv2.DefaultCoordinationTimeout on every
// call containerd waits on, the coordinator marked down for
// contentv2.DefaultRefRetryInterval after one fails), over one shared
// root on tmpfs, its journal in a state directory of its own. The store
// runs its own session loop; the node's coordinator is wrapped (observed)
// so that the benchmark sees what the store asked and was answered.
//
// One deadline is not the product's: a probe of the shared root may take
// rootProbe, not contentv2.DefaultRootProbeTimeout. A real node probes its
// own mount; here thousands of nodes' probes share the benchmark's cores,
// and a probe late for that reason would make its node refuse writes (the
// root "not ready"), which no real node would. The stores count the times
// their root was not ready all the same (root_unready in Acts).
const rootProbe = time.Minute

// openStore opens node n's store over the shared root, its journal under
// stateDir, its counters in a registry of its own.
func (n *node) openStore(root, stateDir string, skipRef bool) error {
	dir := filepath.Join(stateDir, n.id)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	n.reg = prometheus.NewRegistry()
	s, err := contentv2.NewStore(root, n.id, &observed{Coordinator: n.coord, n: n},
		contentv2.WithStateDir(dir), contentv2.WithHostID(n.id), contentv2.WithRegisterer(n.reg), contentv2.WithRootProbe(rootProbe),
		contentv2.WithSkipAddsRef(skipRef))
	if err != nil {
		return fmt.Errorf("node %s: open its contentv2 store: %w", n.id, err)
	}
	n.store = s
	return nil
}

// closeStore closes node n's store (ending its session), if open.
func (n *node) closeStore() {
	if n.store != nil {
		if err := n.store.Close(); err != nil {
			fmt.Fprintf(os.Stderr, "bench-scale: node %s: close its store: %v\n", n.id, err)
		}
		n.store = nil
	}
}

// observed is a node's contentv2.Coordinator as its store sees it,
// noting what the store learns of its session (so that the fleet's
// synced and gap checks work as for the simulated sessions), the lock
// calls of the rollout's blobs (wake-ups, the holders' unlocks), and the
// calls that failed without an answer: each makes the store treat the
// coordinator as down for its retry interval.
type observed struct {
	contentv2.Coordinator
	n *node
}

func (o *observed) Session(ctx context.Context, req contentv2.SessionRequest) (contentv2.SessionInfo, error) {
	sent := time.Now()
	info, err := o.Coordinator.Session(ctx, req)
	o.failed(ctx, err)
	if err != nil {
		o.n.setSynced(false)
		return info, err
	}
	o.n.answered(info, time.Now())
	if info.Synced || !o.n.vouched(sent) {
		o.n.setSynced(info.Synced)
	}
	o.n.mu.Lock()
	o.n.asked = sent
	o.n.mu.Unlock()
	return info, nil
}

func (o *observed) SyncRefs(ctx context.Context, req contentv2.SyncRequest) error {
	err := o.Coordinator.SyncRefs(ctx, req)
	o.failed(ctx, err)
	if err == nil {
		o.n.setSynced(true)
		o.n.mu.Lock()
		o.n.vouchFrom = o.n.asked
		o.n.mu.Unlock()
	}
	return err
}

// vouched reports whether node n, an older one, still counts as synced at
// the coordinator at now although an answer asks it to sync again: its
// last sync vouches for it for a TTL from the session answer before it
// (docs/design.md §10.7), which came after vouchFrom, when that session
// request was sent. Always false for a current node.
func (n *node) vouched(now time.Time) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.older && !n.vouchFrom.IsZero() && n.session.synced && now.Before(n.vouchFrom.Add(n.session.ttl))
}

func (o *observed) AddRef(ctx context.Context, dgst digest.Digest, found bool) error {
	err := o.Coordinator.AddRef(ctx, dgst, found)
	o.failed(ctx, err)
	return err
}

// Lock notes a skip of a rollout blob as a wake-up (image.noteSkip), and
// wraps a pull lock's lease so that its unlock is timed.
func (o *observed) Lock(ctx context.Context, req api.LockRequest) (contentv2.Lock, error) {
	asked := time.Now()
	lk, err := o.Coordinator.Lock(ctx, req)
	got := time.Now()
	o.failed(ctx, err)
	img, j := o.n.rolloutBlob(req.ResourceID)
	if img == nil || req.Type != api.OperationPull {
		return lk, err
	}
	switch {
	case err == nil:
		return &timedLock{Lock: lk, o: o, img: img, j: j}, nil
	case errors.Is(err, api.ErrSkipped):
		img.noteSkip(o.n, j, asked, got)
	}
	return lk, err
}

// failed counts a call that ended without the coordinator's answer
// while its caller still waited: the store then marks the coordinator
// down (contentv2's coordinate) or, for a follower's wait, tries again.
func (o *observed) failed(ctx context.Context, err error) {
	if err == nil || ctx.Err() == context.Canceled || isAnswer(err) {
		return
	}
	o.n.failedCalls.Add(1)
	msg := err.Error()
	o.n.failedErr.CompareAndSwap(nil, &msg)
}

// isAnswer reports whether err is the coordinator's answer (a refusal),
// not a failure to get one.
func isAnswer(err error) bool {
	for _, e := range []error{api.ErrLocked, api.ErrSkipped, api.ErrInUse, api.ErrUnsynced, api.ErrDeleting,
		api.ErrLate, api.ErrNoSession, api.ErrDuplicateNode, api.ErrWrongCluster, api.ErrRootClaimed, api.ErrNotExpired} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// timedLock is a holder's pull lock of a rollout blob: its unlock is
// timed for the wake-ups, and a failed one counted.
type timedLock struct {
	contentv2.Lock
	o   *observed
	img *image
	j   int
}

func (l *timedLock) Unlock(ctx context.Context, success bool, cause error) error {
	if hc := l.o.n.short.hc; hc.PendingRequests() >= hc.MaxConns {
		l.img.behind.Add(1)
	}
	sent := time.Now()
	if success {
		l.img.unlockAt[l.j].Store(sent.UnixNano())
	}
	err := l.Lock.Unlock(ctx, success, cause)
	l.o.failed(ctx, err)
	switch {
	case err != nil:
		l.img.unlockFailed.Add(1)
		msg := fmt.Sprintf("node %s, blob %d: %v", l.o.n.id, l.j, err)
		l.img.unlockErr.CompareAndSwap(nil, &msg)
	case success:
		answered := time.Now()
		l.img.unlocked[l.j].Store(answered.UnixNano())
		l.img.unlock.add(answered.Sub(sent))
	}
	return err
}
