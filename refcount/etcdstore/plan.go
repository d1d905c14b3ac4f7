package etcdstore

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"

	"github.com/containerd/errdefs"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/sharedcontent/sharedcontent/internal/synchash"
	"github.com/sharedcontent/sharedcontent/refcount"
)

// write is the value a key is left with: put val, or deleted.
type write struct {
	del bool
	val string
}

// pair is one reference: its two keys are written together.
type pair struct{ res, node string }

// plan folds a Batch into the writes of its transactions. etcd refuses a
// transaction that writes one key twice, and a batch's writes apply in
// order (a later one sees an earlier one), so the plan applies them, one
// atomic group after the other, to an overlay of the stored state and
// keeps, per group, the value each key it touched is left with. It reads
// only what a write depends on: the set a DropRefs drops, the node's
// references a ReplaceNode replaces (one range of the node's index).
type plan struct {
	ctx context.Context
	s   *Store

	cur map[string]write // every key the batch touched, as the writes so far leave it
	// What was read of the stored references: whole sets, and nodes'
	// references in the buckets read.
	storedSets  map[string]map[string]bool // resource → its nodes
	storedNodes map[string]map[string]bool // node → its resources in nodeRead
	nodeRead    map[string]*refcount.BucketSet
	// The references the batch touched, by resource and by node.
	byRes, byNode map[string]map[string]bool
	// inBucket holds, by node and bucket, the resources of storedNodes
	// and byNode: a bucket-restricted ReplaceNode (a big sync's groups)
	// looks at its buckets only, not at every reference of the node.
	inBucket map[string]*[synchash.Buckets]map[string]bool
	pairOf   map[string]pair // reference and index key → its reference

	groups  []map[string]write // per group: the keys it touched, left as at its end
	touched map[string]bool    // the keys of the current group
}

func newPlan(ctx context.Context, s *Store) *plan {
	return &plan{
		ctx: ctx, s: s,
		cur:         map[string]write{},
		storedSets:  map[string]map[string]bool{},
		storedNodes: map[string]map[string]bool{},
		nodeRead:    map[string]*refcount.BucketSet{},
		byRes:       map[string]map[string]bool{},
		byNode:      map[string]map[string]bool{},
		inBucket:    map[string]*[synchash.Buckets]map[string]bool{},
		pairOf:      map[string]pair{},
	}
}

// group applies one atomic group.
func (p *plan) group(ops []refcount.Write) error {
	p.touched = map[string]bool{}
	for i := range ops {
		if err := p.apply(&ops[i]); err != nil {
			return err
		}
	}
	g := make(map[string]write, len(p.touched))
	for key := range p.touched {
		g[key] = p.cur[key]
	}
	p.groups = append(p.groups, g)
	return nil
}

func (p *plan) put(key, val string) {
	p.cur[key] = write{val: val}
	p.touched[key] = true
}

func (p *plan) del(key string) {
	p.cur[key] = write{del: true}
	p.touched[key] = true
}

func (p *plan) putJSON(key string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("etcdstore: encode %s: %w", key, err)
	}
	p.put(key, string(b))
	return nil
}

// setRef makes node reference res, or not.
func (p *plan) setRef(res, node string, on bool) {
	rk, ik := p.s.k.ref(res, node), p.s.k.index(node, res)
	if on {
		p.put(rk, "")
		p.put(ik, "")
	} else {
		p.del(rk)
		p.del(ik)
	}
	pr := pair{res, node}
	p.pairOf[rk], p.pairOf[ik] = pr, pr
	mark(p.byRes, res, node)
	mark(p.byNode, node, res)
	p.noteBucket(node, synchash.Bucket(res), res)
}

// noteBucket records res, of bucket, among node's resources in inBucket.
func (p *plan) noteBucket(node string, bucket int, res string) {
	b := p.inBucket[node]
	if b == nil {
		b = new([synchash.Buckets]map[string]bool)
		p.inBucket[node] = b
	}
	if b[bucket] == nil {
		b[bucket] = map[string]bool{}
	}
	b[bucket][res] = true
}

// nodeResources returns, sorted by bucket then ID, the resources of node
// read or written so far in buckets (nil: all).
func (p *plan) nodeResources(node string, buckets *refcount.BucketSet) []string {
	if buckets == nil {
		return union(p.storedNodes[node], p.byNode[node])
	}
	var out []string
	if b := p.inBucket[node]; b != nil {
		for i, in := range buckets {
			if in {
				out = append(out, slices.Sorted(maps.Keys(b[i]))...)
			}
		}
	}
	return out
}

func mark(m map[string]map[string]bool, a, b string) {
	if m[a] == nil {
		m[a] = map[string]bool{}
	}
	m[a][b] = true
}

// has reports whether node references res as the writes so far leave it,
// and whether that is known (read or written).
func (p *plan) has(res, node string) (on, known bool) {
	if w, ok := p.cur[p.s.k.ref(res, node)]; ok {
		return !w.del, true
	}
	return p.storedRef(res, node)
}

// storedRef reports whether node references res before the batch, and
// whether that is known: the set, or the node's bucket of res, was read.
func (p *plan) storedRef(res, node string) (on, known bool) {
	if set, ok := p.storedSets[res]; ok {
		return set[node], true
	}
	if read := p.nodeRead[node]; read != nil && read[synchash.Bucket(res)] {
		return p.storedNodes[node][res], true
	}
	return false, false
}

func (p *plan) apply(op *refcount.Write) error {
	k := p.s.k
	switch op.Kind {
	case refcount.WriteAddRef, refcount.WriteRemoveRef:
		if err := cmp.Or(checkID("resource ID", op.Key), checkID("node ID", op.Node)); err != nil {
			return err
		}
		p.setRef(op.Key, op.Node, op.Kind == refcount.WriteAddRef)
	case refcount.WriteDropRefs:
		if err := checkID("resource ID", op.Key); err != nil {
			return err
		}
		if err := p.readSet(op.Key); err != nil {
			return err
		}
		for _, n := range union(p.storedSets[op.Key], p.byRes[op.Key]) {
			if on, _ := p.has(op.Key, n); on {
				p.setRef(op.Key, n, false)
			}
		}
	case refcount.WriteReplaceNode:
		if err := checkID("node ID", op.Node); err != nil {
			return err
		}
		if err := p.readNode(op.Node, op.Buckets); err != nil {
			return err
		}
		for _, res := range p.nodeResources(op.Node, op.Buckets) {
			if _, keep := op.NodeRefs[res]; !keep && op.Buckets.Holds(res) {
				if on, _ := p.has(res, op.Node); on {
					p.setRef(res, op.Node, false)
				}
			}
		}
		for _, res := range slices.Sorted(maps.Keys(op.NodeRefs)) {
			if err := checkID("resource ID", res); err != nil {
				return err
			}
			if on, _ := p.has(res, op.Node); !on {
				p.setRef(res, op.Node, true)
			}
		}
	case refcount.WritePutMember:
		return p.putJSON(k.member(op.Key), op.Member)
	case refcount.WriteDeleteMember:
		p.del(k.member(op.Key))
	case refcount.WritePutIdentity:
		return p.putJSON(k.identity(), op.Identity)
	case refcount.WritePutLeaseFenceMark:
		p.put(k.fence(), encodeUint64(op.Uint64))
	case refcount.WritePutString:
		p.put(k.meta(op.Key), op.String)
	case refcount.WritePutUint64:
		p.put(k.meta(op.Key), encodeUint64(op.Uint64))
	case refcount.WritePutDeleting:
		return p.putJSON(k.deleting(op.Key), op.Deleting)
	case refcount.WriteDropDeleting:
		p.del(k.deleting(op.Key))
	case refcount.WritePutDeleted:
		return p.putJSON(k.deleted(op.Key), op.Deleted)
	case refcount.WriteDropDeleted:
		p.del(k.deleted(op.Key))
	case refcount.WritePutLease:
		return p.putJSON(k.lease(op.Key, op.Lease.LeaseID), op.Lease)
	case refcount.WriteDropLease:
		p.del(k.lease(op.Key, op.Lease.LeaseID))
	case refcount.WritePutPin:
		return p.putJSON(k.pin(op.Key), op.Pin)
	case refcount.WriteDropPin:
		p.del(k.pin(op.Key))
	default:
		return fmt.Errorf("etcdstore: unknown write kind %d: %w", op.Kind, errdefs.ErrInvalidArgument)
	}
	return nil
}

// union returns the keys of a and b, sorted.
func union(a, b map[string]bool) []string {
	m := maps.Clone(a)
	if m == nil {
		m = map[string]bool{}
	}
	maps.Copy(m, b)
	return slices.Sorted(maps.Keys(m))
}

// readSet reads the stored reference set of res, once per batch.
func (p *plan) readSet(res string) error {
	if _, ok := p.storedSets[res]; ok {
		return nil
	}
	prefix := p.s.k.set(res)
	nodes, err := p.readKeys(prefix)
	if err != nil {
		return fmt.Errorf("etcdstore: commit: read the set of %s: %w", res, err)
	}
	p.storedSets[res] = nodes
	return nil
}

// readNode reads the stored references of node in buckets (nil: all),
// each bucket once per batch: one range for the whole node, else one per
// bucket, read together.
func (p *plan) readNode(node string, buckets *refcount.BucketSet) error {
	read := p.nodeRead[node]
	if read == nil {
		read = new(refcount.BucketSet)
		p.nodeRead[node], p.storedNodes[node] = read, map[string]bool{}
	}
	var want []int
	for i := range synchash.Buckets {
		if (buckets == nil || buckets[i]) && !read[i] {
			want = append(want, i)
		}
	}
	if len(want) == 0 {
		return nil
	}
	var ops []clientv3.Op
	if len(want) == synchash.Buckets {
		ops = []clientv3.Op{clientv3.OpGet(p.s.k.node(node), clientv3.WithPrefix(), clientv3.WithKeysOnly())}
	} else {
		for _, i := range want {
			ops = append(ops, clientv3.OpGet(p.s.k.nodeBucket(node, i), clientv3.WithPrefix(), clientv3.WithKeysOnly()))
		}
	}
	n := len(p.s.k.node(node))
	for chunk := range slices.Chunk(ops, p.s.opts.MaxTxnOps) {
		resp, err := p.s.cli.Txn(p.ctx).Then(chunk...).Commit()
		if err != nil {
			return fmt.Errorf("etcdstore: commit: read the references of node %s: %w", node, err)
		}
		for _, r := range resp.Responses {
			for _, kv := range r.GetResponseRange().Kvs {
				rest := string(kv.Key[n:])
				res := indexResource(rest)
				p.storedNodes[node][res] = true
				bucket := indexBucket(rest)
				if bucket < 0 {
					bucket = synchash.Bucket(res)
				}
				p.noteBucket(node, bucket, res)
			}
		}
	}
	for _, i := range want {
		read[i] = true
	}
	return nil
}

// readKeys returns the rest of every key under prefix (one read,
// keys only).
func (p *plan) readKeys(prefix string) (map[string]bool, error) {
	resp, err := p.s.cli.Get(p.ctx, prefix, clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		return nil, err
	}
	out := make(map[string]bool, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		out[string(kv.Key[len(prefix):])] = true
	}
	return out, nil
}
