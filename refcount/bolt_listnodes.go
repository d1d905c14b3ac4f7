package refcount

import (
	"context"
	"fmt"

	bolt "go.etcd.io/bbolt"
)

// ListNodes implements NodeLister: List's page, each set's nodes read in
// the nested bucket's key order (which is their order), into one array
// per page, a node's ID one string per page however many sets name it.
func (s *BoltStorage) ListNodes(ctx context.Context, after string, limit int) ([]NodesEntry, error) {
	if err := checkList(limit); err != nil {
		return nil, err
	}
	// Sized for a page of GET /refs/list (grown past it).
	page := make([]NodesEntry, 0, min(limit, 1<<14))
	all := make([]string, 0, 2*cap(page))
	err := s.view(ctx, func(tx *bolt.Tx) error {
		refs := tx.Bucket(refcountsBucket)
		c := refs.Cursor()
		k := seekAfter(c, after)
		names := map[string]string{}
		for ; k != nil && len(page) < limit; k, _ = c.Next() {
			b, err := setBucket(refs, k)
			if err != nil {
				return err
			}
			start := len(all)
			nc := b.Cursor()
			for n, _ := nc.First(); n != nil; n, _ = nc.Next() {
				name, ok := names[string(n)]
				if !ok {
					name = string(n)
					names[name] = name
				}
				all = append(all, name)
			}
			page = append(page, NodesEntry{ResourceID: string(k), Nodes: all[start:len(all):len(all)]})
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list refcounts: %w", err)
	}
	return page, nil
}

// setBucket returns the nested bucket of the set k of refs, or an error
// that says why k is none (a record of an older format, say).
func setBucket(refs *bolt.Bucket, k []byte) (*bolt.Bucket, error) {
	if b := refs.Bucket(k); b != nil {
		return b, nil
	}
	_, _, err := readSet(refs, k)
	if err == nil {
		err = fmt.Errorf("refcount %s: not a reference set", k)
	}
	return nil, err
}

// seekAfter moves c to the first key greater than after and returns it
// (nil past the last).
func seekAfter(c *bolt.Cursor, after string) []byte {
	k, _ := c.Seek([]byte(after))
	if k != nil && string(k) == after {
		k, _ = c.Next()
	}
	return k
}
