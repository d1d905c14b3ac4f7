package refcount

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/containerd/errdefs"
	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
)

// How bbolt stores reference sets (docs/design.md §10.2): the refcounts bucket holds one nested bucket per resource ID,
// with one key per node that references it (value refMark) and the number
// of such keys as the nested bucket's sequence. Adding or removing one
// reference touches one key and the sequence, O(log N) in the set's size
// N, and whether a node references a resource and how many do are read
// without reading the set (RefState). The functions here change the sets
// only; every write goes through boltRefs (bolt_nodes.go), which keeps
// the per-node index in step.
//
// Until refsFormatNested, refcounts mapped a resource ID to a JSON
// boltRecord, which every change decoded and re-encoded whole. Opening
// such a file migrates it in the open's transaction (migrateRefs). A
// record that does not decode stays as it is: reading it is an error
// wrapping errdefs.ErrDataLoss, as it was, and DropRefs drops it.

// refsFormatKey is the meta key of the reference sets' stored format
// (reserved: the store writes it itself); refsFormatNested is the format
// of nested buckets, refsFormatIndexed the same with the per-node index
// (bolt_nodes.go). A file without the key has JSON records.
const (
	refsFormatKey     = "refs_format"
	refsFormatNested  = 2
	refsFormatIndexed = 3
)

// refsFormat returns the stored format of the reference sets (0: none
// recorded, JSON records).
func refsFormat(meta *bolt.Bucket) uint64 {
	if v := meta.Get([]byte(refsFormatKey)); len(v) == 8 {
		return binary.BigEndian.Uint64(v)
	}
	return 0
}

// refMark is the value of a node's key in a reference set's bucket.
var refMark = []byte{1}

// boltRecord is the JSON form of a Set in files written before
// refsFormatNested.
type boltRecord struct {
	Count int      `json:"count"`
	Nodes []string `json:"nodes"`
}

// decodeRecord decodes a boltRecord. Its Count is not trusted: the set is
// its Nodes.
func decodeRecord(v []byte) (Set, error) {
	var r boltRecord
	if err := json.Unmarshal(v, &r); err != nil {
		return Set{}, fmt.Errorf("decode stored value: %w: %w", errdefs.ErrDataLoss, err)
	}
	return NewSet(r.Nodes...), nil
}

// migrateRefs rewrites JSON reference records as nested buckets, in tx
// (the open's), once: then it records refsFormatNested. Records that do
// not decode are left.
func migrateRefs(tx *bolt.Tx) error {
	meta := tx.Bucket(metaBucket)
	if refsFormat(meta) >= refsFormatNested {
		return nil
	}
	refs := tx.Bucket(refcountsBucket)
	old := map[string]Set{}
	err := refs.ForEach(func(k, v []byte) error {
		if v == nil {
			return nil // a nested bucket already
		}
		if rc, err := decodeRecord(v); err == nil {
			old[string(k)] = rc
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("migrate reference sets: %w", err)
	}
	for id, rc := range old {
		if err := refs.Delete([]byte(id)); err != nil {
			return fmt.Errorf("migrate reference set %s: %w", id, err)
		}
		for n := range rc.Nodes {
			if _, err := addRef(refs, id, n); err != nil {
				return fmt.Errorf("migrate reference set %s: %w", id, err)
			}
		}
	}
	return meta.Put([]byte(refsFormatKey), binary.BigEndian.AppendUint64(nil, refsFormatNested))
}

// readSet returns the reference set stored under id in refs, and whether
// there is one.
func readSet(refs *bolt.Bucket, id []byte) (Set, bool, error) {
	b := refs.Bucket(id)
	if b == nil {
		if v := refs.Get(id); v != nil {
			_, err := decodeRecord(v) // fails: migrateRefs left it
			if err == nil {
				err = fmt.Errorf("a record of an older format: %w", errdefs.ErrDataLoss)
			}
			return Set{}, false, fmt.Errorf("refcount %s: %w", id, err)
		}
		return Set{}, false, nil
	}
	rc := Set{Nodes: make(map[string]struct{}, b.Sequence())}
	err := b.ForEach(func(k, _ []byte) error {
		rc.Nodes[string(k)] = struct{}{}
		return nil
	})
	return rc, true, err
}

// addRef adds node to the set id of refs, creating it if needed, and
// reports whether node was not in it yet. It does not touch the per-node
// index: boltRefs.add does both.
func addRef(refs *bolt.Bucket, id, node string) (bool, error) {
	b, err := refs.CreateBucketIfNotExists([]byte(id))
	if err != nil {
		return false, fmt.Errorf("refcount %s: %w", id, err)
	}
	if b.Get([]byte(node)) != nil {
		return false, nil
	}
	if err := b.Put([]byte(node), refMark); err != nil {
		return false, err
	}
	return true, b.SetSequence(b.Sequence() + 1)
}

// removeRef removes node from the set id of refs, dropping the set when
// node was its last, and reports whether node was in it.
func removeRef(refs *bolt.Bucket, id, node string) (bool, error) {
	b := refs.Bucket([]byte(id))
	if b == nil || b.Get([]byte(node)) == nil {
		return false, nil
	}
	if b.Sequence() <= 1 {
		return true, refs.DeleteBucket([]byte(id))
	}
	if err := b.Delete([]byte(node)); err != nil {
		return false, err
	}
	return true, b.SetSequence(b.Sequence() - 1)
}

// dropRefs drops the set id of refs (or the record migrateRefs left) and
// returns the nodes it held.
func dropRefs(refs *bolt.Bucket, id string) ([]string, error) {
	if refs.Get([]byte(id)) != nil {
		return nil, refs.Delete([]byte(id))
	}
	b := refs.Bucket([]byte(id))
	if b == nil {
		return nil, nil
	}
	nodes := make([]string, 0, b.Sequence())
	err := b.ForEach(func(k, _ []byte) error {
		nodes = append(nodes, string(k))
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("refcount %s: %w", id, err)
	}
	if err := refs.DeleteBucket([]byte(id)); err != nil && !errors.Is(err, berrors.ErrBucketNotFound) {
		return nil, fmt.Errorf("refcount %s: %w", id, err)
	}
	return nodes, nil
}

// RefState implements Storage: two lookups, however big the set.
func (s *BoltStorage) RefState(ctx context.Context, resourceID, node string) (has bool, count int, err error) {
	err = s.view(ctx, func(tx *bolt.Tx) error {
		b := tx.Bucket(refcountsBucket).Bucket([]byte(resourceID))
		if b != nil {
			has, count = b.Get([]byte(node)) != nil, int(b.Sequence())
		}
		return nil
	})
	if err != nil {
		return false, 0, fmt.Errorf("refcount %s: %w", resourceID, err)
	}
	return has, count, nil
}
