package etcdstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/containerd/errdefs"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/sharedcontent/sharedcontent/refcount"
)

// DefaultMaxTxnBytes is how many bytes of keys and values one transaction
// carries at most by default: below etcd's default --max-request-bytes
// (1.5 MiB), with room for the request's framing.
const DefaultMaxTxnBytes = 1 << 20

// Options configure Open.
type Options struct {
	// Prefix is the key prefix of the state; "/" is appended when it does
	// not end with one. Required.
	Prefix string
	// LeaderKey is the key whose create revision is the handle's fence:
	// the owner's election key (concurrency.Election.Key). Required.
	LeaderKey string
	// OwnerFence is LeaderKey's create revision when the owner won
	// (concurrency.Election.Rev). Required.
	OwnerFence int64
	// MaxTxnOps is the most writes one transaction holds: the server's
	// --max-txn-ops. 0 means refcount.MaxGroupWrites (etcd's default).
	MaxTxnOps int
	// MaxTxnBytes is the most bytes of keys and values one transaction
	// holds. 0 means DefaultMaxTxnBytes.
	MaxTxnBytes int
	// FlushInterval is how long a submitted batch waits at most for
	// others to share its transaction (group commit, Submit). 0 means
	// DefaultFlushInterval; a negative interval turns group commit off:
	// every batch is committed in its own transactions before Submit
	// returns.
	FlushInterval time.Duration
	// Metrics receives the store's transactions, so that several
	// handles (one per election won) count into one registered
	// Collector. nil: a Metrics of the store's own, registered nowhere.
	Metrics *Metrics
}

// Store is a refcount.Storage on etcd, guarded by an election key's create
// revision (docs/design.md §7). It is safe for concurrent use; its
// transactions run one at a time, and concurrent batches share them
// (group commit, Submit). It does not own its client: Close leaves it
// open.
type Store struct {
	cli    *clientv3.Client
	k      keys
	leader string
	fence  int64
	opts   Options
	closed atomic.Bool

	// mu serializes the transactions: a plan reads what its writes
	// depend on (a set that DropRefs drops, a node's references that
	// ReplaceNode replaces), then writes; no other write of the owner may
	// come between. Another owner's would fail its guard.
	mu sync.Mutex
	// q holds the submitted batches that the flusher has not taken yet.
	q queue
	// lost is the error of the first guard that failed: the handle is
	// fenced for good.
	lost    atomic.Pointer[error]
	metrics *Metrics
	// listWidth is the last width of List's windows (window.go): the
	// next List starts from it. nil: none yet.
	listWidth atomic.Pointer[big.Int]
	// refsKV reads the reference keys' windows: the client (tests count
	// its reads).
	refsKV clientv3.KV
	// toTheEnd makes List read to the end of refs/ each time, as it did
	// before windows (benchmarks compare).
	toTheEnd bool
}

var _ refcount.Storage = (*Store)(nil)

var errClosed = fmt.Errorf("etcdstore: the store is closed: %w", errdefs.ErrFailedPrecondition)

// Open returns a handle on the state under opts.Prefix whose Commits
// succeed while opts.LeaderKey has create revision opts.OwnerFence. It reads
// the leader key once: when that revision is already gone, the error
// wraps refcount.ErrFenced.
func Open(ctx context.Context, cli *clientv3.Client, opts Options) (*Store, error) {
	if opts.Prefix == "" || opts.LeaderKey == "" || opts.OwnerFence <= 0 {
		return nil, fmt.Errorf("etcdstore: open: a prefix, a leader key and a positive fence are required (got %q, %q, %d): %w",
			opts.Prefix, opts.LeaderKey, opts.OwnerFence, errdefs.ErrInvalidArgument)
	}
	if !strings.HasSuffix(opts.Prefix, "/") {
		opts.Prefix += "/"
	}
	if opts.MaxTxnOps <= 0 {
		opts.MaxTxnOps = refcount.MaxGroupWrites
	}
	if opts.MaxTxnBytes <= 0 {
		opts.MaxTxnBytes = DefaultMaxTxnBytes
	}
	if opts.FlushInterval == 0 {
		opts.FlushInterval = DefaultFlushInterval
	}
	s := &Store{cli: cli, k: keys{opts.Prefix}, leader: opts.LeaderKey, fence: opts.OwnerFence, opts: opts, metrics: opts.Metrics, refsKV: cli}
	if s.metrics == nil {
		s.metrics = NewMetrics()
	}
	s.q.kick, s.q.stopped = make(chan struct{}, 1), make(chan struct{})
	resp, err := cli.Get(ctx, opts.LeaderKey)
	if err != nil {
		return nil, fmt.Errorf("etcdstore: open: read the leader key: %w", err)
	}
	if now := createRevision(resp.Kvs); now != opts.OwnerFence {
		return nil, s.fenced(now)
	}
	return s, nil
}

// OpenElection opens the state under prefix for the winner of e: call it
// after e.Campaign returned. The fence is e.Rev(), the election key's
// create revision.
func OpenElection(ctx context.Context, cli *clientv3.Client, prefix string, e *concurrency.Election, opts Options) (*Store, error) {
	opts.Prefix, opts.LeaderKey, opts.OwnerFence = prefix, e.Key(), e.Rev()
	return Open(ctx, cli, opts)
}

// OwnerFence implements refcount.Storage: the leader key's create revision.
func (s *Store) OwnerFence() uint64 { return uint64(s.fence) }

// Close implements refcount.Storage. It commits the batches submitted
// before it (their waits return as usual), then returns. It leaves the
// client open.
func (s *Store) Close() error {
	s.closed.Store(true)
	s.q.mu.Lock()
	started := s.q.started
	s.q.closing = true
	s.q.mu.Unlock()
	if started {
		s.q.wake()
		<-s.q.stopped
	}
	return nil
}

func (s *Store) usable(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if s.closed.Load() {
		return errClosed
	}
	return nil
}

// fenced is the error of a Commit (or Open) that found the leader key's
// create revision at now (0: the key is gone).
func (s *Store) fenced(now int64) error {
	return fmt.Errorf("etcdstore: leader key %s has create revision %d, this handle's fence is %d: %w",
		s.leader, now, s.fence, refcount.ErrFenced)
}

func createRevision(kvs []*mvccpb.KeyValue) int64 {
	if len(kvs) == 0 {
		return 0
	}
	return kvs[0].CreateRevision
}

// Get implements refcount.Storage.
func (s *Store) Get(ctx context.Context, resourceID string) (refcount.Set, error) {
	if err := s.usable(ctx); err != nil {
		return refcount.Set{}, err
	}
	resp, err := s.cli.Get(ctx, s.k.set(resourceID), clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		return refcount.Set{}, fmt.Errorf("etcdstore: get %s: %w", resourceID, err)
	}
	if len(resp.Kvs) == 0 {
		return refcount.Set{}, fmt.Errorf("etcdstore: reference set of %s: %w", resourceID, errdefs.ErrNotFound)
	}
	var set refcount.Set
	n := len(s.k.set(resourceID))
	for _, kv := range resp.Kvs {
		set.Add(string(kv.Key[n:]))
	}
	return set, nil
}

// RefState implements refcount.Storage with one read of two counts.
func (s *Store) RefState(ctx context.Context, resourceID, node string) (has bool, count int, err error) {
	if err := s.usable(ctx); err != nil {
		return false, 0, err
	}
	return s.refState(ctx, resourceID, node)
}

// refState is RefState, also while the store closes (Close commits what
// is pending, and counts its counted adds).
func (s *Store) refState(ctx context.Context, resourceID, node string) (has bool, count int, err error) {
	resp, err := s.cli.Txn(ctx).Then(
		clientv3.OpGet(s.k.ref(resourceID, node), clientv3.WithCountOnly()),
		clientv3.OpGet(s.k.set(resourceID), clientv3.WithPrefix(), clientv3.WithCountOnly()),
	).Commit()
	if err != nil {
		return false, 0, fmt.Errorf("etcdstore: reference state of %s: %w", resourceID, err)
	}
	return resp.Responses[0].GetResponseRange().Count > 0, int(resp.Responses[1].GetResponseRange().Count), nil
}

// listPage is how many keys one read of List asks for at least.
const listPage = 1000

// List implements refcount.Storage. A page may take more than one read
// (sets are one key per reference); the reads after the first are at the
// first's revision, so the page is one consistent view. When etcd
// compacted that revision away meanwhile, the page is read again.
func (s *Store) List(ctx context.Context, after string, limit int) ([]refcount.Entry, error) {
	if limit <= 0 {
		return nil, fmt.Errorf("etcdstore: list limit %d: %w", limit, errdefs.ErrInvalidArgument)
	}
	if err := s.usable(ctx); err != nil {
		return nil, err
	}
	for {
		page, err := s.list(ctx, after, limit)
		if !errors.Is(err, rpctypes.ErrCompacted) {
			return page, err
		}
	}
}

// list reads one page of List, in windows (window.go), every read at the
// first's revision.
func (s *Store) list(ctx context.Context, after string, limit int) ([]refcount.Entry, error) {
	from := s.k.dir(refsDir)
	if after != "" {
		// The keys of after's set are after+NUL+node: the next set starts
		// at after+"\x01" or above.
		from = s.k.dir(refsDir) + after + "\x01"
	}
	w := newWindows(s.k, max(listPage, 2*limit), s.listWidth.Load())
	w.toTheEnd = s.toTheEnd
	var out []refcount.Entry
	_, err := scanRefs(ctx, s.refsKV, w, from, 0, func(id, node string) bool {
		if len(out) == 0 || out[len(out)-1].ResourceID != id {
			if len(out) == limit {
				return false
			}
			out = append(out, refcount.Entry{ResourceID: id})
		}
		out[len(out)-1].Refs.Add(node)
		return true
	})
	if w.width != nil {
		s.listWidth.Store(w.width)
	}
	if err != nil {
		return nil, fmt.Errorf("etcdstore: list: %w", err)
	}
	return out, nil
}

// ListMembers implements refcount.Storage. A record that does not decode
// is an error wrapping errdefs.ErrDataLoss.
func (s *Store) ListMembers(ctx context.Context) ([]refcount.Member, error) {
	if err := s.usable(ctx); err != nil {
		return nil, err
	}
	resp, err := s.cli.Get(ctx, s.k.dir(membersDir), clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("etcdstore: list members: %w", err)
	}
	out := make([]refcount.Member, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		var m refcount.Member
		if err := decode(kv.Key, kv.Value, &m); err != nil {
			return nil, err
		}
		m.ID = s.k.trim(membersDir, string(kv.Key))
		out = append(out, m)
	}
	return out, nil
}

// Identity implements refcount.Storage.
func (s *Store) Identity(ctx context.Context) (refcount.Identity, error) {
	var id refcount.Identity
	v, err := s.value(ctx, s.k.identity())
	if err != nil || v == nil {
		return id, err
	}
	return id, decode([]byte(s.k.identity()), v, &id)
}

// LeaseFenceMark implements refcount.Storage.
func (s *Store) LeaseFenceMark(ctx context.Context) (uint64, error) {
	return s.uint64(ctx, s.k.fence())
}

// GetUint64 implements refcount.Storage. A stored value that is not 8
// bytes is an error wrapping errdefs.ErrDataLoss.
func (s *Store) GetUint64(ctx context.Context, key string) (uint64, error) {
	return s.uint64(ctx, s.k.meta(key))
}

// GetString implements refcount.Storage.
func (s *Store) GetString(ctx context.Context, key string) (string, error) {
	v, err := s.value(ctx, s.k.meta(key))
	return string(v), err
}

// Deletes implements refcount.Storage, with one read of both directories.
func (s *Store) Deletes(ctx context.Context) (refcount.Deletes, error) {
	d := refcount.Deletes{InFlight: map[string]refcount.DeleteMarker{}, Completed: map[string]refcount.DeleteCompletion{}}
	if err := s.usable(ctx); err != nil {
		return d, err
	}
	resp, err := s.cli.Txn(ctx).Then(
		clientv3.OpGet(s.k.dir(deletingDir), clientv3.WithPrefix()),
		clientv3.OpGet(s.k.dir(deletedDir), clientv3.WithPrefix()),
	).Commit()
	if err != nil {
		return d, fmt.Errorf("etcdstore: deletes: %w", err)
	}
	for _, kv := range resp.Responses[0].GetResponseRange().Kvs {
		var m refcount.DeleteMarker
		if err := decode(kv.Key, kv.Value, &m); err != nil {
			return d, err
		}
		d.InFlight[s.k.trim(deletingDir, string(kv.Key))] = m
	}
	for _, kv := range resp.Responses[1].GetResponseRange().Kvs {
		var c refcount.DeleteCompletion
		if err := decode(kv.Key, kv.Value, &c); err != nil {
			return d, err
		}
		d.Completed[s.k.trim(deletedDir, string(kv.Key))] = c
	}
	return d, nil
}

// Leases implements refcount.Storage, with one read of the directory.
func (s *Store) Leases(ctx context.Context) ([]refcount.LeaseRecord, error) {
	if err := s.usable(ctx); err != nil {
		return nil, err
	}
	resp, err := s.cli.Get(ctx, s.k.dir(leasesDir), clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("etcdstore: leases: %w", err)
	}
	out := make([]refcount.LeaseRecord, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		var l refcount.LeaseRecord
		if err := decode(kv.Key, kv.Value, &l); err != nil {
			return nil, err
		}
		l.ResourceID, l.LeaseID, _ = splitPair(s.k.trim(leasesDir, string(kv.Key)))
		out = append(out, l)
	}
	return out, nil
}

// Pins implements refcount.Storage, with one read of the directory.
func (s *Store) Pins(ctx context.Context) ([]refcount.PinRecord, error) {
	if err := s.usable(ctx); err != nil {
		return nil, err
	}
	resp, err := s.cli.Get(ctx, s.k.dir(pinsDir), clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("etcdstore: pins: %w", err)
	}
	out := make([]refcount.PinRecord, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		var p refcount.PinRecord
		if err := decode(kv.Key, kv.Value, &p); err != nil {
			return nil, err
		}
		p.Name = s.k.trim(pinsDir, string(kv.Key))
		out = append(out, p)
	}
	return out, nil
}

// value returns key's value, nil when absent.
func (s *Store) value(ctx context.Context, key string) ([]byte, error) {
	if err := s.usable(ctx); err != nil {
		return nil, err
	}
	resp, err := s.cli.Get(ctx, key)
	if err != nil {
		return nil, fmt.Errorf("etcdstore: get %s: %w", key, err)
	}
	if len(resp.Kvs) == 0 {
		return nil, nil
	}
	return resp.Kvs[0].Value, nil
}

func (s *Store) uint64(ctx context.Context, key string) (uint64, error) {
	v, err := s.value(ctx, key)
	if err != nil || v == nil {
		return 0, err
	}
	return decodeUint64(key, v)
}

func decode(key, v []byte, into any) error {
	if err := json.Unmarshal(v, into); err != nil {
		return fmt.Errorf("etcdstore: %s: decode: %w: %w", key, errdefs.ErrDataLoss, err)
	}
	return nil
}
