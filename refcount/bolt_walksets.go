package refcount

import (
	"context"
	"fmt"

	bolt "go.etcd.io/bbolt"
)

// walkChunk is about how many references (a set's nodes, plus one for
// the set) one read transaction of WalkSets reads before the file's
// pages it read are let go (dropResident), which bounds the file's pages
// the walk has resident at once. More than those pages: on a fault the
// kernel maps the pages around it that the page cache holds
// (fault-around, 64 KiB), and a set of 500 nodes spans several pages, so
// at 1,000 × 10,000 a transaction of 250,000 references had up to 146 MB
// of the file resident before its drop; 50,000 bound it to a fifth. The
// drops cost a madvise of the mapping each, 200 for 10M references. A
// variable for tests.
var walkChunk = 50_000

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
				b, err := setBucket(refs, k)
				if err != nil {
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
