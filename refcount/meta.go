package refcount

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"

	"github.com/containerd/errdefs"
	bolt "go.etcd.io/bbolt"
)

// Meta keys of the identity and the fence high-water mark: the store
// writes them only through PutIdentity and PutLeaseFenceMark. They are the keys
// the coordinator used before those writes existed, so that a database
// written then reads the same.
const (
	clusterIDKey = "cluster_id"
	epochKey     = "epoch"
	fenceMarkKey = "fence_high_water_mark"
	// rootKey holds the identity's Root (JSON RootClaim), absent while
	// none is recorded.
	rootKey = "root"
)

func reservedMeta(key string) bool {
	return key == clusterIDKey || key == epochKey || key == rootKey || key == fenceMarkKey || key == refsFormatKey
}

// GetUint64 implements Storage. A stored value that is not 8 bytes is an
// error wrapping errdefs.ErrDataLoss.
func (s *BoltStorage) GetUint64(ctx context.Context, key string) (uint64, error) {
	var v uint64
	err := s.view(ctx, func(tx *bolt.Tx) (err error) {
		v, err = getUint64(tx, key)
		return err
	})
	return v, err
}

// GetString implements Storage.
func (s *BoltStorage) GetString(ctx context.Context, key string) (string, error) {
	var v string
	err := s.view(ctx, func(tx *bolt.Tx) error {
		v = string(tx.Bucket(metaBucket).Get([]byte(key)))
		return nil
	})
	return v, err
}

// Identity implements Storage.
func (s *BoltStorage) Identity(ctx context.Context) (Identity, error) {
	var id Identity
	err := s.view(ctx, func(tx *bolt.Tx) (err error) {
		meta := tx.Bucket(metaBucket)
		id.ClusterID = string(meta.Get([]byte(clusterIDKey)))
		if b := meta.Get([]byte(rootKey)); b != nil {
			id.Root = new(RootClaim)
			if err := json.Unmarshal(b, id.Root); err != nil {
				return fmt.Errorf("meta %s: decode: %w: %w", rootKey, errdefs.ErrDataLoss, err)
			}
		}
		id.Epoch, err = getUint64(tx, epochKey)
		return err
	})
	return id, err
}

// LeaseFenceMark implements Storage.
func (s *BoltStorage) LeaseFenceMark(ctx context.Context) (uint64, error) {
	return s.GetUint64(ctx, fenceMarkKey)
}

// getUint64 reads the meta key as a big-endian uint64, 0 when absent.
func getUint64(tx *bolt.Tx, key string) (uint64, error) {
	b := tx.Bucket(metaBucket).Get([]byte(key))
	if b == nil {
		return 0, nil
	}
	if len(b) != 8 {
		return 0, fmt.Errorf("meta %s: stored value is %d bytes, want 8: %w", key, len(b), errdefs.ErrDataLoss)
	}
	return binary.BigEndian.Uint64(b), nil
}

// putRoot writes the identity's Root into meta, or removes it when nil.
func putRoot(meta *bolt.Bucket, r *RootClaim) error {
	if r == nil {
		return meta.Delete([]byte(rootKey))
	}
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	return meta.Put([]byte(rootKey), b)
}
