package refcount

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/containerd/errdefs"
	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
)

// DefaultOpenTimeout is how long OpenBoltStorage waits for another process to
// release the database file.
const DefaultOpenTimeout = time.Second

// Bucket names. refcounts maps a resource ID to a JSON boltRecord; meta maps
// a MetaStore key to an 8-byte big-endian uint64 or a string; deleting and
// deleted map a resource ID to a JSON DeleteMarker and DeleteCompletion.
var (
	refcountsBucket = []byte("refcounts")
	metaBucket      = []byte("meta")
	deletingBucket  = []byte("deleting")
	deletedBucket   = []byte("deleted")
)

// boltRecord is the stored form of a ReferenceCount. Count is written for
// people reading the file; decoding recomputes it from Nodes.
type boltRecord struct {
	Count int      `json:"count"`
	Nodes []string `json:"nodes"`
}

// BoltStorage is a Storage in one bbolt database file.
//
// It is safe for concurrent use. Each mutation is on disk when its call
// returns. Mutations use group commit: a lone one is committed at once,
// and those that arrive while a commit runs share the next transaction and
// fsync. Only one BoltStorage, in one process, may have a file open at a
// time.
type BoltStorage struct {
	db     *bolt.DB
	writes *groupCommitter
}

var (
	_ Storage   = (*BoltStorage)(nil)
	_ MetaStore = (*BoltStorage)(nil)
)

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

// OpenBoltStorage opens, creating if needed, the bbolt database at path. The
// parent directory must exist. If another opener still holds the file after
// the open timeout, the error wraps errdefs.ErrUnavailable.
func OpenBoltStorage(path string, opts ...BoltOption) (*BoltStorage, error) {
	o := boltOptions{openTimeout: DefaultOpenTimeout}
	for _, opt := range opts {
		opt(&o)
	}
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: o.openTimeout})
	if errors.Is(err, berrors.ErrTimeout) {
		return nil, fmt.Errorf("open refcount db %s: still locked by another opener after %s: %w", path, o.openTimeout, errdefs.ErrUnavailable)
	}
	if err != nil {
		return nil, fmt.Errorf("open refcount db %s: %w", path, err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		for _, name := range [][]byte{refcountsBucket, metaBucket, membersBucket, deletingBucket, deletedBucket} {
			if _, err := tx.CreateBucketIfNotExists(name); err != nil {
				return fmt.Errorf("create bucket %s: %w", name, err)
			}
		}
		return nil
	})
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("open refcount db %s: %w", path, err)
	}
	return &BoltStorage{db: db, writes: newGroupCommitter(db)}, nil
}

// Get implements Storage. A stored value that does not decode is an error
// wrapping errdefs.ErrDataLoss.
func (s *BoltStorage) Get(ctx context.Context, resourceID string) (ReferenceCount, error) {
	if err := ctx.Err(); err != nil {
		return ReferenceCount{}, err
	}
	var (
		rc    ReferenceCount
		found bool
	)
	err := s.db.View(func(tx *bolt.Tx) error {
		v := tx.Bucket(refcountsBucket).Get([]byte(resourceID))
		if v == nil {
			return nil
		}
		found = true
		var err error
		rc, err = decodeRecord(v)
		return err
	})
	if err != nil {
		return ReferenceCount{}, fmt.Errorf("refcount %s: %w", resourceID, err)
	}
	if !found {
		return ReferenceCount{}, fmt.Errorf("refcount %s: %w", resourceID, errdefs.ErrNotFound)
	}
	return rc, nil
}

// Set implements Storage.
func (s *BoltStorage) Set(ctx context.Context, resourceID string, rc ReferenceCount) error {
	if resourceID == "" {
		return fmt.Errorf("refcount: empty resource ID: %w", errdefs.ErrInvalidArgument)
	}
	return s.Commit(ctx, new(Batch).SetRefs(resourceID, rc))
}

// Delete implements Storage.
func (s *BoltStorage) Delete(ctx context.Context, resourceID string) error {
	if err := ctx.Err(); err != nil || resourceID == "" {
		return err
	}
	return s.Commit(ctx, new(Batch).DropRefs(resourceID))
}

// List implements Storage. It reads every entry in one read transaction
// before calling fn; a stored value that does not decode stops it with an
// error wrapping errdefs.ErrDataLoss.
func (s *BoltStorage) List(ctx context.Context, fn func(resourceID string, rc ReferenceCount) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	var entries []entry
	err := s.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(refcountsBucket).ForEach(func(k, v []byte) error {
			rc, err := decodeRecord(v)
			if err != nil {
				return fmt.Errorf("refcount %s: %w", k, err)
			}
			entries = append(entries, entry{id: string(k), rc: rc})
			return nil
		})
	})
	if err != nil {
		return fmt.Errorf("list refcounts: %w", err)
	}
	return visit(ctx, entries, fn)
}

// ReplaceNode implements Storage: one transaction and one fsync, whatever
// the number of entries it changes.
func (s *BoltStorage) ReplaceNode(ctx context.Context, node string, refs map[string]struct{}) error {
	return s.Commit(ctx, new(Batch).ReplaceNode(node, refs))
}

// putRecord stores rc under id in b, or drops the entry when rc is empty.
func putRecord(b *bolt.Bucket, id string, rc ReferenceCount) error {
	if rc.Count == 0 {
		return b.Delete([]byte(id))
	}
	nodes := rc.NodeList()
	v, err := json.Marshal(boltRecord{Count: len(nodes), Nodes: nodes})
	if err != nil {
		return fmt.Errorf("refcount %s: encode: %w", id, err)
	}
	return b.Put([]byte(id), v)
}

// Close commits the mutations in flight and closes the database file.
// Calls after Close fail.
func (s *BoltStorage) Close() error {
	s.writes.close()
	return s.db.Close()
}

// decodeRecord decodes a stored boltRecord. Count is recomputed from the
// node set, never taken from the record.
func decodeRecord(v []byte) (ReferenceCount, error) {
	var r boltRecord
	if err := json.Unmarshal(v, &r); err != nil {
		return ReferenceCount{}, fmt.Errorf("decode stored value: %w: %w", errdefs.ErrDataLoss, err)
	}
	return New(r.Nodes...), nil
}
