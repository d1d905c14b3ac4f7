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
		final  = map[string]write{} // the open transaction's keys, as it leaves them
		n      int                  // the open transaction's groups
		// The open transaction's writes (the keys of final it changes)
		// and their bytes, kept as groups come and go: a transaction
		// of many small batches (group commit) is not summed again
		// after each.
		keys, bytes int
	)
	// change is what key left as w adds to the open transaction: one
	// write, unless the key already holds w.
	change := func(key string, w write) (int, int) {
		was, known := before[key]
		if !known {
			was, known = p.stored(key)
		}
		if known && was == w {
			return 0, 0
		}
		return 1, len(key) + len(w.val)
	}
	set := func(key string, w write, ok bool) {
		if old, had := final[key]; had {
			k, b := change(key, old)
			keys, bytes = keys-k, bytes-b
		}
		if !ok {
			delete(final, key)
			return
		}
		final[key] = w
		k, b := change(key, w)
		keys, bytes = keys+k, bytes+b
	}
	closeTxn := func() {
		t := txn{groups: n}
		for _, key := range slices.Sorted(maps.Keys(final)) {
			w := final[key]
			if k, _ := change(key, w); k == 0 {
				continue
			}
			if w.del {
				t.ops = append(t.ops, clientv3.OpDelete(key))
			} else {
				t.ops = append(t.ops, clientv3.OpPut(key, w.val))
			}
		}
		maps.Copy(before, final)
		out = append(out, t)
		final, n, keys, bytes = map[string]write{}, 0, 0, 0
	}
	for i, g := range p.groups {
		type prior struct {
			w  write
			ok bool
		}
		undo := make(map[string]prior, len(g))
		for key, w := range g {
			old, ok := final[key]
			undo[key] = prior{old, ok}
			set(key, w, true)
		}
		if keys <= maxOps && bytes <= maxBytes {
			n++
			continue
		}
		if n == 0 {
			return nil, tooBig(i, keys, bytes, maxOps, maxBytes)
		}
		for key, old := range undo {
			set(key, old.w, old.ok)
		}
		closeTxn()
		for key, w := range g {
			set(key, w, true)
		}
		if keys > maxOps || bytes > maxBytes {
			return nil, tooBig(i, keys, bytes, maxOps, maxBytes)
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
