package etcdstore

import (
	"context"
	"fmt"
	"slices"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/sharedcontent/sharedcontent/refcount"
)

var _ refcount.CountingSubmitter = (*Store)(nil)

// counted is what a counted add (SubmitAddRef) learns from the
// transaction that commits it.
type counted struct {
	res, node string
	added     bool // the node was not surely in the set before
	n         int  // the set's size right after the transaction
}

// SubmitAddRef implements refcount.CountingSubmitter (docs/design.md
// §7.1, "Adds that count in their transaction"). The add is a Submit of a
// Batch.AddRef, written whether or not the node is there already: no read
// before it. The transaction that commits it puts the reference key with
// etcd's previous value returned (added: there was none) and, after its
// writes, counts the resource's set (etcd's reads in a transaction see its
// writes), so an add costs no round trip of its own, and the adds that
// share a transaction share its reads: one count-only read per resource.
func (s *Store) SubmitAddRef(ctx context.Context, resourceID, node string) (wait func() (added bool, count int, err error)) {
	if err := checkID("resource ID", resourceID); err != nil {
		return func() (bool, int, error) { return false, 0, err }
	}
	if err := checkID("node ID", node); err != nil {
		return func() (bool, int, error) { return false, 0, err }
	}
	c := &counted{res: resourceID, node: node}
	it, err := s.submitItem(ctx, new(refcount.Batch).AddRef(resourceID, node), false, c)
	return func() (bool, int, error) {
		if err == nil {
			err = it.wait()
		}
		if err != nil {
			return false, 0, err
		}
		return c.added, c.n, nil
	}
}

// countedSets returns the resources that items' counted adds count, in
// order: one read each, after the writes of their transaction.
func countedSets(items []*submitted) []string {
	var out []string
	for _, it := range items {
		if c := it.count; c != nil && !slices.Contains(out, c.res) {
			out = append(out, c.res)
		}
	}
	return out
}

// withCounts returns ops, whose puts of the counted adds' reference keys
// ask for the previous value, followed by a count-only read of each of
// sets.
func (s *Store) withCounts(ops []clientv3.Op, items []*submitted, sets []string) []clientv3.Op {
	if len(sets) == 0 {
		return ops
	}
	refKeys := map[string]bool{}
	for _, it := range items {
		if c := it.count; c != nil {
			refKeys[s.k.ref(c.res, c.node)] = true
		}
	}
	out := make([]clientv3.Op, 0, len(ops)+len(sets))
	for _, op := range ops {
		if key := string(op.KeyBytes()); op.IsPut() && refKeys[key] {
			op = clientv3.OpPut(key, string(op.ValueBytes()), clientv3.WithPrevKV())
		}
		out = append(out, op)
	}
	for _, res := range sets {
		out = append(out, clientv3.OpGet(s.k.set(res), clientv3.WithPrefix(), clientv3.WithCountOnly()))
	}
	return out
}

// readCounts gives items' counted adds what the transaction resp, of ops
// (withCounts's), answered. A counted add whose reference key the
// transaction did not put (another batch of it wrote the key last, or
// dropped it) is taken as added.
func (s *Store) readCounts(resp *clientv3.TxnResponse, ops []clientv3.Op, items []*submitted, sets []string) {
	if len(sets) == 0 {
		return
	}
	writes := len(ops) - len(sets)
	existed := map[string]bool{}
	for i, op := range ops[:writes] {
		if p := resp.Responses[i].GetResponsePut(); op.IsPut() && p != nil && p.PrevKv != nil {
			existed[string(op.KeyBytes())] = true
		}
	}
	sizes := map[string]int{}
	for j, res := range sets {
		sizes[res] = int(resp.Responses[writes+j].GetResponseRange().Count)
	}
	for _, it := range items {
		if c := it.count; c != nil {
			c.added, c.n = !existed[s.k.ref(c.res, c.node)], sizes[c.res]
		}
	}
}

// countAlone reads, for a counted add committed without its counts (a
// store whose MaxTxnOps leaves no room for them), the set's size after
// its commit.
func (s *Store) countAlone(ctx context.Context, it *submitted) error {
	c := it.count
	if c == nil {
		return nil
	}
	_, n, err := s.refState(ctx, c.res, c.node)
	if err != nil {
		return fmt.Errorf("etcdstore: count the references of %s after the add: %w", c.res, err)
	}
	c.added, c.n = true, n
	return nil
}
