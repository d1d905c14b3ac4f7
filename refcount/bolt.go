package refcount

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/containerd/errdefs"
	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
)

// DefaultOpenTimeout is how long OpenBoltStorage waits for another process to
// release the database file.
const DefaultOpenTimeout = time.Second

// Bucket names. refcounts holds a nested bucket per resource ID, its
// reference set (bolt_refs.go); nodes the per-node index, a nested bucket
// per node naming the resources it references (bolt_nodes.go); meta maps
// a meta key to an 8-byte big-endian uint64 or a string; deleting and
// deleted map a resource ID to a JSON DeleteMarker and DeleteCompletion;
// leases maps a resource ID, NUL, a lease ID to a JSON LeaseRecord;
// owner holds the guard (ownerKey: the fence of the newest handle, an
// 8-byte big-endian uint64).
var (
	refcountsBucket = []byte("refcounts")
	metaBucket      = []byte("meta")
	deletingBucket  = []byte("deleting")
	deletedBucket   = []byte("deleted")
	leasesBucket    = []byte("leases")
	pinsBucket      = []byte("pins")
	ownerBucket     = []byte("owner")
	ownerKey        = []byte("fence")
)

// BoltStorage is a handle on a Storage in one bbolt database file.
//
// It is safe for concurrent use. Each Commit is on disk when it returns.
// Commits use group commit: a lone one is committed at once, and those
// that arrive while a commit runs share the next transaction and fsync.
// Only one process at a time may have a file open. Opening it bumps the
// stored owner, and every Commit checks, in its transaction, that its
// handle is still the owner (ErrFenced otherwise); TakeOver makes another
// handle on the same open file.
type BoltStorage struct {
	file   *boltFile
	fence  uint64
	closed atomic.Bool
}

// boltFile is an open database file and the handles on it.
type boltFile struct {
	db     *bolt.DB
	writes *groupCommitter

	mu      sync.Mutex
	handles int // protected by mu; open handles, the last to close closes db
}

var _ LocalStorage = (*BoltStorage)(nil)

// initialMmapSize is the address space bbolt maps at open (the file is
// not grown to it). A write transaction that grows the file past the
// mapping remaps it, copying every page the transaction changed out of
// the old one first: a 100,000-reference sync did so at each doubling,
// most of its commit. 1 GiB of address space is free on 64-bit hosts
// (etcd maps 10 GiB).
const initialMmapSize = 1 << 30

// BoltOption configures OpenBoltStorage.
type BoltOption func(*boltOptions)

type boltOptions struct {
	openTimeout time.Duration
}

// WithOpenTimeout sets how long OpenBoltStorage waits for the file lock held
// by another opener (DefaultOpenTimeout if not given). Zero waits forever.
func WithOpenTimeout(d time.Duration) BoltOption {
	return func(o *boltOptions) { o.openTimeout = d }
}

// OpenBoltStorage opens, creating if needed, the bbolt database at path,
// and takes it over: its handle's fence is one more than the last
// opener's. The parent directory must exist. If another opener still
// holds the file after the open timeout, the error wraps
// errdefs.ErrUnavailable.
func OpenBoltStorage(path string, opts ...BoltOption) (*BoltStorage, error) {
	o := boltOptions{openTimeout: DefaultOpenTimeout}
	for _, opt := range opts {
		opt(&o)
	}
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: o.openTimeout, InitialMmapSize: initialMmapSize})
	if errors.Is(err, berrors.ErrTimeout) {
		return nil, fmt.Errorf("open refcount db %s: still locked by another opener after %s: %w", path, o.openTimeout, errdefs.ErrUnavailable)
	}
	if err != nil {
		return nil, fmt.Errorf("open refcount db %s: %w", path, err)
	}
	var fence uint64
	err = db.Update(func(tx *bolt.Tx) error {
		for _, name := range [][]byte{refcountsBucket, nodesBucket, metaBucket, membersBucket, deletingBucket, deletedBucket, leasesBucket, pinsBucket, ownerBucket} {
			if _, err := tx.CreateBucketIfNotExists(name); err != nil {
				return fmt.Errorf("create bucket %s: %w", name, err)
			}
		}
		if err := migrateRefs(tx); err != nil {
			return err
		}
		fence, err = bumpOwner(tx)
		return err
	})
	if err == nil {
		err = buildNodeIndex(db)
	}
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("open refcount db %s: %w", path, err)
	}
	f := &boltFile{db: db, writes: newGroupCommitter(db), handles: 1}
	return &BoltStorage{file: f, fence: fence}, nil
}

// TakeOver implements LocalStorage: the new handle shares s's file, which
// stays open until every handle on it is closed.
func (s *BoltStorage) TakeOver(ctx context.Context) (LocalStorage, error) {
	if err := s.usable(ctx); err != nil {
		return nil, err
	}
	f := s.file
	f.mu.Lock()
	if f.handles == 0 {
		f.mu.Unlock()
		return nil, errClosed
	}
	f.handles++
	f.mu.Unlock()
	h := &BoltStorage{file: f}
	err := f.writes.commit(func(tx *bolt.Tx) (err error) {
		h.fence, err = bumpOwner(tx)
		return err
	})
	if err != nil {
		h.Close()
		return nil, fmt.Errorf("refcount: take over: %w", err)
	}
	return h, nil
}

// bumpOwner makes the next fence the owner's and returns it.
func bumpOwner(tx *bolt.Tx) (uint64, error) {
	fence, err := owner(tx)
	if err != nil {
		return 0, err
	}
	fence++
	return fence, tx.Bucket(ownerBucket).Put(ownerKey, binary.BigEndian.AppendUint64(nil, fence))
}

// owner returns the stored owner's fence.
func owner(tx *bolt.Tx) (uint64, error) {
	v := tx.Bucket(ownerBucket).Get(ownerKey)
	if v == nil {
		return 0, nil
	}
	if len(v) != 8 {
		return 0, fmt.Errorf("stored owner is %d bytes, want 8: %w", len(v), errdefs.ErrDataLoss)
	}
	return binary.BigEndian.Uint64(v), nil
}

// OwnerFence implements Storage.
func (s *BoltStorage) OwnerFence() uint64 { return s.fence }

// usable returns ctx.Err(), or errClosed after Close.
func (s *BoltStorage) usable(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if s.closed.Load() {
		return errClosed
	}
	return nil
}

// view runs fn in a read transaction.
func (s *BoltStorage) view(ctx context.Context, fn func(*bolt.Tx) error) error {
	if err := s.usable(ctx); err != nil {
		return err
	}
	return s.file.db.View(fn)
}

// Get implements Storage. A stored value that does not decode is an error
// wrapping errdefs.ErrDataLoss.
func (s *BoltStorage) Get(ctx context.Context, resourceID string) (Set, error) {
	var (
		rc    Set
		found bool
	)
	err := s.view(ctx, func(tx *bolt.Tx) error {
		var err error
		rc, found, err = readSet(tx.Bucket(refcountsBucket), []byte(resourceID))
		return err
	})
	if err != nil {
		return Set{}, fmt.Errorf("refcount %s: %w", resourceID, err)
	}
	if !found {
		return Set{}, fmt.Errorf("refcount %s: %w", resourceID, errdefs.ErrNotFound)
	}
	return rc, nil
}

// List implements Storage, in one read transaction. A stored value that
// does not decode is an error wrapping errdefs.ErrDataLoss.
func (s *BoltStorage) List(ctx context.Context, after string, limit int) ([]Entry, error) {
	if err := checkList(limit); err != nil {
		return nil, err
	}
	var page []Entry
	err := s.view(ctx, func(tx *bolt.Tx) error {
		refs := tx.Bucket(refcountsBucket)
		c := refs.Cursor()
		k := seekAfter(c, after)
		for ; k != nil && len(page) < limit; k, _ = c.Next() {
			rc, _, err := readSet(refs, k)
			if err != nil {
				return err
			}
			page = append(page, Entry{ResourceID: string(k), Refs: rc})
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list refcounts: %w", err)
	}
	return page, nil
}

// Close releases the handle. The last handle on the file commits the
// writes in flight and closes the file. Calls after Close fail; Close
// again does nothing.
func (s *BoltStorage) Close() error {
	if !s.closed.CompareAndSwap(false, true) {
		return nil
	}
	f := s.file
	f.mu.Lock()
	f.handles--
	last := f.handles == 0
	f.mu.Unlock()
	if !last {
		return nil
	}
	f.writes.close()
	return f.db.Close()
}
