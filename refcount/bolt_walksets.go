package refcount

import (
	"context"
	"fmt"

	bolt "go.etcd.io/bbolt"
)

// walkChunk is about how many references (a set's nodes, plus one for
// the set) one read transaction of WalkSets reads before the file's
// pages it read are let go (dropResident). A variable for tests.
var walkChunk = 250_000

// WalkSets implements SetWalker: the sets in read transactions of about
// walkChunk references each, every ID and node handed to fn as bbolt maps
// it (no copy), one slice of nodes reused for every set. At the end of
// each transaction the file's pages are let go of the process's resident
// set (dropResident): a walk of every set reads most of the file, which
// at 1,000 nodes × 10,000 references is gigabytes of mapped pages the
// process would otherwise keep counted as its own (docs/design.md §10.9).
func (s *BoltStorage) WalkSets(ctx context.Context, fn func(id []byte, nodes [][]byte) error) error {
	var (
		after []byte
		nodes [][]byte
		done  bool
	)
	for !done {
		err := s.view(ctx, func(tx *bolt.Tx) error {
			defer dropResident(s.file.db, tx)
			refs := tx.Bucket(refcountsBucket)
			c := refs.Cursor()
			read := 0
			k := seekAfter(c, string(after))
			for ; k != nil && read < walkChunk; k, _ = c.Next() {
				b := refs.Bucket(k)
				if b == nil {
					_, _, err := readSet(refs, k) // says why: a record of an older format
					if err == nil {
						err = fmt.Errorf("refcount %s: not a reference set", k)
					}
					return err
				}
				nodes = nodes[:0]
				nc := b.Cursor()
				for n, _ := nc.First(); n != nil; n, _ = nc.Next() {
					nodes = append(nodes, n)
				}
				if err := fn(k, nodes); err != nil {
					return err
				}
				read += 1 + len(nodes)
				after = append(after[:0], k...)
			}
			done = k == nil
			return nil
		})
		if err != nil {
			return fmt.Errorf("walk reference sets: %w", err)
		}
	}
	return nil
}
