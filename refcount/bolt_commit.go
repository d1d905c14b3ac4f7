package refcount

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/containerd/errdefs"
	bolt "go.etcd.io/bbolt"
)

// Commit implements Storage: the batch is one mutation of the group
// committer, so its writes share one bbolt transaction (and maybe other
// batches' fsync), which first checks that this handle is still the
// owner. A write that fails rolls the transaction back; the committer
// then retries every other batch of the group alone.
func (s *BoltStorage) Commit(ctx context.Context, b *Batch) error {
	return s.Submit(ctx, b)()
}

// Submit implements Storage: the batch joins the group committer's
// queue before Submit returns, so it is applied after every batch
// submitted or committed before and before every one submitted after;
// wait returns once its transaction is on disk.
func (s *BoltStorage) Submit(ctx context.Context, b *Batch) (wait func() error) {
	failed := func(err error) func() error { return func() error { return err } }
	if err := s.usable(ctx); err != nil {
		return failed(err)
	}
	if b.Len() == 0 {
		return failed(nil)
	}
	if err := checkAll(b.writes); err != nil {
		return failed(fmt.Errorf("refcount: commit: %w", err))
	}
	// Encode outside the transaction: the committer's goroutine runs it.
	ws := b.writes
	vals := make([][]byte, len(ws))
	for i := range ws {
		v, err := encodeWrite(&ws[i])
		if err != nil {
			return failed(fmt.Errorf("refcount: commit: %w", err))
		}
		vals[i] = v
	}
	done, err := s.file.writes.submit(func(tx *bolt.Tx) error {
		if err := s.owned(tx); err != nil {
			return err
		}
		var idx indexAdds
		for i := range ws {
			if err := applyWrite(tx, &ws[i], vals[i], &idx); err != nil {
				return err
			}
		}
		return idx.put(tx.Bucket(nodesBucket))
	})
	if err != nil {
		return failed(err)
	}
	return func() error { return commitErr(<-done) }
}

// owned fails unless this handle still owns the file, in tx: every write
// transaction checks it first.
func (s *BoltStorage) owned(tx *bolt.Tx) error {
	now, err := owner(tx)
	if err != nil {
		return err
	}
	if now != s.fence {
		return fenced(s.fence, now)
	}
	return nil
}

// commitErr is the error a commit returns for its transaction's outcome
// err: ErrFenced as it is, any other wrapped.
func commitErr(err error) error {
	if err != nil && !errors.Is(err, ErrFenced) {
		return fmt.Errorf("refcount: commit: %w", err)
	}
	return err
}

// encodeWrite returns the stored value of w, for the kinds that store one
// value (PutIdentity stores two: applyWrite encodes them).
func encodeWrite(w *Write) ([]byte, error) {
	switch w.Kind {
	case WritePutMember:
		return json.Marshal(w.Member)
	case WritePutString:
		return []byte(w.String), nil
	case WritePutUint64, WritePutLeaseFenceMark:
		return binary.BigEndian.AppendUint64(nil, w.Uint64), nil
	case WritePutDeleting:
		return json.Marshal(w.Deleting)
	case WritePutDeleted:
		return json.Marshal(w.Deleted)
	case WritePutLease:
		return json.Marshal(w.Lease)
	case WritePutPin:
		return json.Marshal(w.Pin)
	}
	return nil, nil
}

// applyWrite makes one checked write in tx. An add's key in the per-node
// index is put later, with those of the adds that follow it (idx), before
// any write of another kind: that write may read the index.
func applyWrite(tx *bolt.Tx, w *Write, v []byte, idx *indexAdds) error {
	if w.Kind == WriteAddRef {
		return refsOf(tx).addLater(w.Key, w.Node, idx)
	}
	if err := idx.put(tx.Bucket(nodesBucket)); err != nil {
		return err
	}
	key := []byte(w.Key)
	switch w.Kind {
	case WritePutMember, WritePutString, WritePutUint64, WritePutDeleting, WritePutDeleted:
		return tx.Bucket(bucketOf(w.Kind)).Put(key, v)
	case WritePutLeaseFenceMark:
		return tx.Bucket(metaBucket).Put([]byte(fenceMarkKey), v)
	case WritePutIdentity:
		meta := tx.Bucket(metaBucket)
		if err := meta.Put([]byte(clusterIDKey), []byte(w.Identity.ClusterID)); err != nil {
			return err
		}
		if err := putRoot(meta, w.Identity.Root); err != nil {
			return err
		}
		return meta.Put([]byte(epochKey), binary.BigEndian.AppendUint64(nil, w.Identity.Epoch))
	case WriteDeleteMember, WriteDropDeleting, WriteDropDeleted:
		return tx.Bucket(bucketOf(w.Kind)).Delete(key)
	case WritePutLease:
		return tx.Bucket(leasesBucket).Put([]byte(leaseKey(w.Key, w.Lease.LeaseID)), v)
	case WriteDropLease:
		return tx.Bucket(leasesBucket).Delete([]byte(leaseKey(w.Key, w.Lease.LeaseID)))
	case WritePutPin:
		return tx.Bucket(pinsBucket).Put(key, v)
	case WriteDropPin:
		return tx.Bucket(pinsBucket).Delete(key)
	case WriteDropRefs:
		return refsOf(tx).drop(w.Key)
	case WriteRemoveRef:
		return refsOf(tx).remove(w.Key, w.Node)
	case WriteReplaceNode:
		return refsOf(tx).replaceNode(w.Node, w.Buckets, w.NodeRefs)
	}
	return fmt.Errorf("refcount: unknown write kind %d: %w", w.Kind, errdefs.ErrInvalidArgument)
}

func bucketOf(k WriteKind) []byte {
	switch k {
	case WritePutMember, WriteDeleteMember:
		return membersBucket
	case WritePutDeleting, WriteDropDeleting:
		return deletingBucket
	case WritePutDeleted, WriteDropDeleted:
		return deletedBucket
	}
	return metaBucket
}

// Deletes implements Storage. A stored value that does not decode is an
// error wrapping errdefs.ErrDataLoss.
func (s *BoltStorage) Deletes(ctx context.Context) (Deletes, error) {
	out := Deletes{InFlight: map[string]DeleteMarker{}, Completed: map[string]DeleteCompletion{}}
	err := s.view(ctx, func(tx *bolt.Tx) error {
		if err := decodeAll(tx, deletingBucket, out.InFlight); err != nil {
			return err
		}
		return decodeAll(tx, deletedBucket, out.Completed)
	})
	if err != nil {
		return Deletes{}, fmt.Errorf("list deletes: %w", err)
	}
	return out, nil
}

// decodeAll decodes every JSON value of the bucket into out.
func decodeAll[V any](tx *bolt.Tx, bucket []byte, out map[string]V) error {
	return tx.Bucket(bucket).ForEach(func(k, raw []byte) error {
		var v V
		if err := json.Unmarshal(raw, &v); err != nil {
			return fmt.Errorf("%s %s: decode: %w: %w", bucket, k, errdefs.ErrDataLoss, err)
		}
		out[string(k)] = v
		return nil
	})
}

// Leases implements Storage. A stored value that does not decode is an
// error wrapping errdefs.ErrDataLoss.
func (s *BoltStorage) Leases(ctx context.Context) ([]LeaseRecord, error) {
	var out []LeaseRecord
	err := s.view(ctx, func(tx *bolt.Tx) error {
		return tx.Bucket(leasesBucket).ForEach(func(k, raw []byte) error {
			var l LeaseRecord
			if err := json.Unmarshal(raw, &l); err != nil {
				return fmt.Errorf("%s %q: decode: %w: %w", leasesBucket, k, errdefs.ErrDataLoss, err)
			}
			l.ResourceID, l.LeaseID = splitLeaseKey(string(k))
			out = append(out, l)
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("list leases: %w", err)
	}
	return out, nil
}

// Pins implements Storage. A stored value that does not decode is an
// error wrapping errdefs.ErrDataLoss.
func (s *BoltStorage) Pins(ctx context.Context) ([]PinRecord, error) {
	var out []PinRecord
	err := s.view(ctx, func(tx *bolt.Tx) error {
		return tx.Bucket(pinsBucket).ForEach(func(k, raw []byte) error {
			var p PinRecord
			if err := json.Unmarshal(raw, &p); err != nil {
				return fmt.Errorf("%s %q: decode: %w: %w", pinsBucket, k, errdefs.ErrDataLoss, err)
			}
			p.Name = string(k)
			out = append(out, p)
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("list pins: %w", err)
	}
	return out, nil
}
