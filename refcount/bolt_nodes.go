package refcount

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"

	"github.com/sharedcontent/sharedcontent/internal/synchash"
)

// The per-node index (docs/design.md §10.2): the nodes bucket holds one
// nested bucket per node that references anything, with one key per
// resource it references: the resource's synchash bucket (one byte)
// followed by the resource ID, value refMark. It is the reference sets
// seen from the other side, kept in the transaction of every write that
// adds or drops a reference, so that replacing a node's references
// (ReplaceNode: a full sync, forgetting a node) reads the node's own
// references, not every set: O(the node's old and new references),
// whatever else is stored. A by-hash replace (ReplaceNodeBuckets) seeks
// to the buckets it replaces and reads only the node's references in
// them. A node's bucket is dropped with its last reference.
//
// Files of refsFormatNested have no index: opening one builds it
// (buildNodeIndex), then records refsFormatIndexed.

// nodesBucket is the per-node index's top-level bucket.
var nodesBucket = []byte("nodes")

// indexChunk is about how many references one transaction of
// buildNodeIndex indexes (whole reference sets: a set bigger than it is
// indexed in one transaction). A variable for tests.
var indexChunk = 100_000

// indexEntry is one key of the index: node references the resource of
// key (indexKey).
type indexEntry struct {
	node string
	key  []byte
}

// indexKey is the key of resource id in a node's index bucket.
func indexKey(id string) []byte {
	k := make([]byte, 1, 1+len(id))
	k[0] = byte(synchash.Bucket(id))
	return append(k, id...)
}

// boltRefs are the reference sets and the per-node index of one write
// transaction: every change of a set goes through it, so both stay
// equal.
type boltRefs struct {
	sets, nodes *bolt.Bucket
}

func refsOf(tx *bolt.Tx) boltRefs {
	return boltRefs{sets: tx.Bucket(refcountsBucket), nodes: tx.Bucket(nodesBucket)}
}

// addLater adds node to the set id, and its key in the node's index to
// idx, for idx.put.
func (r boltRefs) addLater(id, node string, idx *indexAdds) error {
	added, err := addRef(r.sets, id, node)
	if err == nil && added {
		*idx = append(*idx, indexEntry{node: node, key: indexKey(id)})
	}
	return err
}

// indexAdds are keys of the per-node index that a run of adds has yet to
// put (boltRefs.addLater). Their order in the run is the order of the
// resource IDs, or any (a shared first sync's adds are each node's in ID
// order), not the index's: an index key starts with the resource's hash
// bucket, so in ID order each put landed at a random place of the node's
// page, and bbolt moves the keys after it in memory: a first sync of
// 10,000 references, each a put into the node's fresh bucket, was
// quadratic (a quarter of the CPU of a fleet's first syncs).
type indexAdds []indexEntry

// put puts idx's keys in the index's key order, each node's bucket
// opened once, and empties idx.
func (idx *indexAdds) put(nodes *bolt.Bucket) error {
	if len(*idx) == 0 {
		return nil
	}
	err := putIndex(nodes, *idx)
	*idx = (*idx)[:0]
	return err
}

// remove removes node from the set id and id from the node's index.
func (r boltRefs) remove(id, node string) error {
	removed, err := removeRef(r.sets, id, node)
	if err != nil || !removed {
		return err
	}
	return r.unindex(node, id)
}

// drop drops the set id and id from the index of each node it held:
// O(the set's size).
func (r boltRefs) drop(id string) error {
	nodes, err := dropRefs(r.sets, id)
	if err != nil {
		return err
	}
	for _, n := range nodes {
		if err := r.unindex(n, id); err != nil {
			return err
		}
	}
	return nil
}

// replaceNode makes node a reference of exactly the sets refs, among the
// sets of buckets (nil: all; a set outside them is left as it is),
// reading only the node's index: O(the node's old and new references).
func (r boltRefs) replaceNode(node string, buckets *BucketSet, refs map[string]struct{}) error {
	var drop []string
	if nb := r.nodes.Bucket([]byte(node)); nb != nil {
		consider := func(k []byte) {
			if _, ok := refs[string(k[1:])]; !ok {
				drop = append(drop, string(k[1:]))
			}
		}
		c := nb.Cursor()
		if buckets == nil {
			for k, _ := c.First(); k != nil; k, _ = c.Next() {
				consider(k)
			}
		} else {
			for _, i := range buckets.List() {
				for k, _ := c.Seek([]byte{byte(i)}); k != nil && k[0] == byte(i); k, _ = c.Next() {
					consider(k)
				}
			}
		}
	}
	// In key order (removals last key first), so that bbolt inserts each
	// key at the end of its page's keys and removes the last: a page
	// grows within a transaction and is split only at its commit, and in
	// random order every insert or removal moves the keys after it, which
	// made a 100,000-reference replace quadratic (minutes).
	slices.Sort(drop)
	var dropped []string
	for _, id := range slices.Backward(drop) {
		removed, err := removeRef(r.sets, id, node)
		if err != nil {
			return err
		}
		if removed {
			dropped = append(dropped, id)
		}
	}
	for _, k := range slices.Backward(byIndexKey(dropped)) {
		if err := r.unindex(node, k.id); err != nil {
			return err
		}
	}
	var added []string
	for _, id := range slices.Sorted(maps.Keys(refs)) {
		ok, err := addRef(r.sets, id, node)
		if err != nil {
			return err
		}
		if ok {
			added = append(added, id)
		}
	}
	for _, k := range byIndexKey(added) {
		if err := indexAdd(r.nodes, node, k.id); err != nil {
			return err
		}
	}
	return nil
}

// keyedID is a resource ID with its index key.
type keyedID struct {
	key []byte
	id  string
}

// byIndexKey returns ids with their index keys, in the order of those.
func byIndexKey(ids []string) []keyedID {
	out := make([]keyedID, len(ids))
	for i, id := range ids {
		out[i] = keyedID{indexKey(id), id}
	}
	slices.SortFunc(out, func(a, b keyedID) int { return bytes.Compare(a.key, b.key) })
	return out
}

// indexAdd records in the index that node references id.
func indexAdd(nodes *bolt.Bucket, node, id string) error {
	nb, err := nodes.CreateBucketIfNotExists([]byte(node))
	if err != nil {
		return fmt.Errorf("node index %s: %w", node, err)
	}
	return nb.Put(indexKey(id), refMark)
}

// unindex removes id from node's index, dropping the node's bucket when
// it was its last.
func (r boltRefs) unindex(node, id string) error {
	nb := r.nodes.Bucket([]byte(node))
	if nb == nil {
		return nil
	}
	if err := nb.Delete(indexKey(id)); err != nil {
		return fmt.Errorf("node index %s: %w", node, err)
	}
	if k, _ := nb.Cursor().First(); k == nil {
		return r.nodes.DeleteBucket([]byte(node))
	}
	return nil
}

// buildNodeIndex builds the per-node index of a file of refsFormatNested
// (or older, once migrateRefs has run) and records refsFormatIndexed: it
// drops whatever index the file has (one left half built, or one a
// coordinator of format 2 let go stale: it ignores the bucket and
// records format 2 again), then walks every reference set, indexChunk
// references per transaction, the last of which records the format. A
// crash part-way leaves the format at 2, so the next open starts again.
func buildNodeIndex(db *bolt.DB) error {
	var done bool
	err := db.View(func(tx *bolt.Tx) error {
		done = refsFormat(tx.Bucket(metaBucket)) >= refsFormatIndexed
		return nil
	})
	if err != nil || done {
		return err
	}
	err = db.Update(func(tx *bolt.Tx) error {
		if err := tx.DeleteBucket(nodesBucket); err != nil && !errors.Is(err, berrors.ErrBucketNotFound) {
			return err
		}
		_, err := tx.CreateBucket(nodesBucket)
		return err
	})
	if err != nil {
		return fmt.Errorf("build the per-node index: %w", err)
	}
	var after []byte
	for !done {
		err := db.Update(func(tx *bolt.Tx) (err error) {
			r := refsOf(tx)
			c := r.sets.Cursor()
			k, v := c.First()
			if after != nil {
				k, v = c.Seek(after)
				if bytes.Equal(k, after) {
					k, v = c.Next()
				}
			}
			var chunk []indexEntry
			for ; k != nil && len(chunk) < indexChunk; k, v = c.Next() {
				if v != nil {
					continue // a record migrateRefs left: no set
				}
				key := indexKey(string(k))
				err := r.sets.Bucket(k).ForEach(func(node, _ []byte) error {
					chunk = append(chunk, indexEntry{node: string(node), key: key})
					return nil
				})
				if err != nil {
					return fmt.Errorf("index reference set %s: %w", k, err)
				}
				after = slices.Clone(k)
			}
			if err := putIndex(r.nodes, chunk); err != nil {
				return err
			}
			if k != nil {
				return nil
			}
			done = true
			return tx.Bucket(metaBucket).Put([]byte(refsFormatKey), binary.BigEndian.AppendUint64(nil, refsFormatIndexed))
		})
		if err != nil {
			return fmt.Errorf("build the per-node index: %w", err)
		}
	}
	return nil
}

// putIndex puts the index keys of entries (reordering them) in key
// order: bbolt inserts into a page's keys in memory by shifting those
// after it, so entries put at random would cost O(len²) moves; in order,
// each put appends. Each node's bucket is opened once.
func putIndex(nodes *bolt.Bucket, entries []indexEntry) error {
	slices.SortFunc(entries, func(a, b indexEntry) int {
		if c := strings.Compare(a.node, b.node); c != 0 {
			return c
		}
		return bytes.Compare(a.key, b.key)
	})
	var nb *bolt.Bucket
	for i, e := range entries {
		if i == 0 || e.node != entries[i-1].node {
			var err error
			if nb, err = nodes.CreateBucketIfNotExists([]byte(e.node)); err != nil {
				return fmt.Errorf("node index %s: %w", e.node, err)
			}
		}
		if err := nb.Put(e.key, refMark); err != nil {
			return fmt.Errorf("node index %s: %w", e.node, err)
		}
	}
	return nil
}

// NodeRefs implements Storage: one read of the node's index.
func (s *BoltStorage) NodeRefs(ctx context.Context, node string) ([]string, error) {
	var ids []string
	err := s.view(ctx, func(tx *bolt.Tx) error {
		nb := tx.Bucket(nodesBucket).Bucket([]byte(node))
		if nb == nil {
			return nil
		}
		return nb.ForEach(func(k, _ []byte) error {
			ids = append(ids, string(k[1:]))
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("references of node %s: %w", node, err)
	}
	slices.Sort(ids)
	return ids, nil
}
