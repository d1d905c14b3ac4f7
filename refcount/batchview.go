package refcount

import (
	"context"
	"slices"

	"github.com/containerd/errdefs"
)

// batchView answers whether a node is in a reference set as the stored
// state and a batch's writes so far leave it, without applying the batch
// (the Manager's hash changes, hashes.go). Each write it is told of is
// numbered; the answer for (resource, node) comes from the latest write
// that decides it (an add or remove of that pair, a drop of the set, a
// replace of the node's references whose buckets hold the resource), or,
// when none does, from the storage.
type batchView struct {
	ctx      context.Context
	storage  Storage
	seq      int
	refs     map[viewKey]viewMark       // adds and removes
	touched  map[string][]string        // resource → nodes of refs
	dropped  map[string]int             // resource → its drop's number
	replaced map[string]viewReplacement // node → its last replace
	sets     map[string]Set             // sets read whole
	byNode   map[string]map[string]bool // node → its stored references, read whole (readNode)
}

type viewKey struct{ id, node string }

type viewMark struct {
	seq int
	in  bool
}

type viewReplacement struct {
	seq     int
	buckets *BucketSet
	refs    map[string]struct{}
}

func newBatchView(ctx context.Context, storage Storage) *batchView {
	return &batchView{
		ctx: ctx, storage: storage,
		refs: map[viewKey]viewMark{}, touched: map[string][]string{},
		dropped: map[string]int{}, replaced: map[string]viewReplacement{}, sets: map[string]Set{},
	}
}

// has reports whether node is in the set id.
func (v *batchView) has(id, node string) (bool, error) {
	best, in := -1, false
	if mk, ok := v.refs[viewKey{id, node}]; ok {
		best, in = mk.seq, mk.in
	}
	if seq, ok := v.dropped[id]; ok && seq > best {
		best, in = seq, false
	}
	if r, ok := v.replaced[node]; ok && r.seq > best && r.buckets.Holds(id) {
		best = r.seq
		_, in = r.refs[id]
	}
	if best >= 0 {
		return in, nil
	}
	if rc, ok := v.sets[id]; ok {
		return rc.Has(node), nil
	}
	if refs, ok := v.byNode[node]; ok {
		return refs[id], nil
	}
	has, _, err := v.storage.RefState(v.ctx, id, node)
	return has, err
}

// nodes returns the nodes in the set id.
func (v *batchView) nodes(id string) ([]string, error) {
	rc, err := v.read(id)
	if err != nil {
		return nil, err
	}
	candidates := rc.NodeList()
	candidates = append(candidates, v.touched[id]...)
	for n, r := range v.replaced {
		if _, ok := r.refs[id]; ok {
			candidates = append(candidates, n)
		}
	}
	slices.Sort(candidates)
	var out []string
	for _, n := range slices.Compact(candidates) {
		in, err := v.has(id, n)
		if err != nil {
			return nil, err
		}
		if in {
			out = append(out, n)
		}
	}
	return out, nil
}

// readNode reads node's stored references whole, in one request, from
// the storage's index by node (Storage.NodeRefs): a batch of many single
// writes of one node (a big bucket's AddRefs and RemoveRefs,
// ReplaceNodeGroups) then asks the storage nothing per write.
func (v *batchView) readNode(node string) error {
	ids, err := v.storage.NodeRefs(v.ctx, node)
	if err != nil {
		return err
	}
	refs := make(map[string]bool, len(ids))
	for _, id := range ids {
		refs[id] = true
	}
	if v.byNode == nil {
		v.byNode = map[string]map[string]bool{}
	}
	v.byNode[node] = refs
	return nil
}

// read returns the stored set id, read once.
func (v *batchView) read(id string) (Set, error) {
	if rc, ok := v.sets[id]; ok {
		return rc, nil
	}
	rc, err := v.storage.Get(v.ctx, id)
	if errdefs.IsNotFound(err) {
		rc, err = Set{}, nil
	}
	if err != nil {
		return Set{}, err
	}
	v.sets[id] = rc
	return rc, nil
}

// set records that the batch adds node to (in) or removes it from the
// set id.
func (v *batchView) set(id, node string, in bool) {
	v.seq++
	k := viewKey{id, node}
	if _, ok := v.refs[k]; !ok {
		v.touched[id] = append(v.touched[id], node)
	}
	v.refs[k] = viewMark{v.seq, in}
}

// drop records that the batch drops the set id.
func (v *batchView) drop(id string) {
	v.seq++
	v.dropped[id] = v.seq
}

// replace records that the batch replaces node's references.
func (v *batchView) replace(node string, buckets *BucketSet, refs map[string]struct{}) {
	v.seq++
	v.replaced[node] = viewReplacement{v.seq, buckets, refs}
}
