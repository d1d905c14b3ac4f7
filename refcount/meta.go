package refcount

import (
	"context"
	"encoding/binary"
	"fmt"

	"github.com/containerd/errdefs"
	bolt "go.etcd.io/bbolt"
)

// MetaStore keeps small named values next to the reference counts, in the
// same database, such as the lock server's fence high-water mark and its
// cluster ID. It is safe for concurrent use, and a Put is durable when it
// returns. Like Storage, it returns ctx.Err() when ctx is already done.
type MetaStore interface {
	// GetUint64 returns the value of key, or 0 and a nil error when key was
	// never put.
	GetUint64(ctx context.Context, key string) (uint64, error)
	// PutUint64 sets key to v. An empty key is an error wrapping
	// errdefs.ErrInvalidArgument.
	PutUint64(ctx context.Context, key string, v uint64) error
	// GetString returns the string stored under key, or "" and a nil
	// error when key was never put.
	GetString(ctx context.Context, key string) (string, error)
	// PutString sets key to v, as PutUint64 does.
	PutString(ctx context.Context, key, v string) error
}

// GetUint64 implements MetaStore. A stored value that is not 8 bytes is an
// error wrapping errdefs.ErrDataLoss.
func (s *BoltStorage) GetUint64(ctx context.Context, key string) (uint64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	var v uint64
	err := s.db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket(metaBucket).Get([]byte(key))
		if b == nil {
			return nil
		}
		if len(b) != 8 {
			return fmt.Errorf("stored value is %d bytes, want 8: %w", len(b), errdefs.ErrDataLoss)
		}
		v = binary.BigEndian.Uint64(b)
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("meta %s: %w", key, err)
	}
	return v, nil
}

// PutUint64 implements MetaStore.
func (s *BoltStorage) PutUint64(ctx context.Context, key string, v uint64) error {
	return s.Commit(ctx, new(Batch).PutUint64(key, v))
}

// GetString implements MetaStore.
func (s *BoltStorage) GetString(ctx context.Context, key string) (string, error) {
	if err := ctx.Err(); err != nil {
		return "", err
	}
	var v string
	err := s.db.View(func(tx *bolt.Tx) error {
		v = string(tx.Bucket(metaBucket).Get([]byte(key)))
		return nil
	})
	return v, err
}

// PutString implements MetaStore.
func (s *BoltStorage) PutString(ctx context.Context, key, v string) error {
	return s.Commit(ctx, new(Batch).PutString(key, v))
}
