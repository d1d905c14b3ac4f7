package etcdstore

import (
	"fmt"
	"maps"
	"slices"

	"github.com/containerd/errdefs"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// stored returns what key holds before the batch, as far as the plan read
// it: known only for reference and index keys of a set or node it read.
func (p *plan) stored(key string) (w write, known bool) {
	pr, ok := p.pairOf[key]
	if !ok {
		return write{}, false
	}
	on, known := p.storedRef(pr.res, pr.node)
	return write{del: !on}, known
}

// txn is one transaction's writes.
type txn struct {
	ops    []clientv3.Op
	groups int // how many of the batch's groups it commits
}

// pack divides the groups into transactions of at most maxOps writes and
// maxBytes bytes of keys and values, in order, never splitting a group;
// within one transaction a key is written once, with its last value, and
// a key left as it is stored is not written. A group too large alone is
// an error wrapping errdefs.ErrResourceExhausted.
func (p *plan) pack(maxOps, maxBytes int) ([]txn, error) {
	var (
		out    []txn
		before = map[string]write{} // keys as the transactions so far leave them
		final  map[string]write     // the open transaction's keys, as it leaves them
		n      int                  // the open transaction's groups
	)
	// writes returns the open transaction's writes: the keys it changes.
	writes := func() (keys []string, bytes int) {
		for _, key := range slices.Sorted(maps.Keys(final)) {
			w := final[key]
			was, known := before[key]
			if !known {
				was, known = p.stored(key)
			}
			if known && was == w {
				continue
			}
			keys = append(keys, key)
			bytes += len(key) + len(w.val)
		}
		return keys, bytes
	}
	closeTxn := func() {
		keys, _ := writes()
		t := txn{groups: n}
		for _, key := range keys {
			w := final[key]
			if w.del {
				t.ops = append(t.ops, clientv3.OpDelete(key))
			} else {
				t.ops = append(t.ops, clientv3.OpPut(key, w.val))
			}
		}
		maps.Copy(before, final)
		out = append(out, t)
		final, n = map[string]write{}, 0
	}
	final = map[string]write{}
	for i, g := range p.groups {
		undo := map[string]*write{}
		for key, w := range g {
			if old, ok := final[key]; ok {
				undo[key] = &old
			} else {
				undo[key] = nil
			}
			final[key] = w
		}
		keys, bytes := writes()
		if len(keys) <= maxOps && bytes <= maxBytes {
			n++
			continue
		}
		if n == 0 {
			return nil, tooBig(i, len(keys), bytes, maxOps, maxBytes)
		}
		for key, old := range undo {
			if old == nil {
				delete(final, key)
			} else {
				final[key] = *old
			}
		}
		closeTxn()
		maps.Copy(final, g)
		if keys, bytes := writes(); len(keys) > maxOps || bytes > maxBytes {
			return nil, tooBig(i, len(keys), bytes, maxOps, maxBytes)
		}
		n = 1
	}
	if n > 0 {
		closeTxn()
	}
	return out, nil
}

// tooBig is the error of a batch whose group i alone is too large for one
// transaction (refcount/doc.go, "The size of a transaction").
func tooBig(i, keys, bytes, maxOps, maxBytes int) error {
	return fmt.Errorf("etcdstore: commit: atomic group %d of the batch writes %d keys (%d bytes), more than one transaction holds (%d keys, %d bytes): %w",
		i+1, keys, bytes, maxOps, maxBytes, errdefs.ErrResourceExhausted)
}
