package lockserver

import (
	"context"
	"fmt"
	"time"

	"github.com/sharedcontent/sharedcontent/internal/failpoint"
	"github.com/sharedcontent/sharedcontent/lockserver/api"
	"github.com/sharedcontent/sharedcontent/refcount"
)

// AddRef handles POST /refs/add: it records that node uses the resource
// (for example a blob it is about to commit). It is refused with
// api.ErrDeleting while a delete of the resource is in flight, because that
// delete already decided nobody uses it, and with api.ErrNoSession unless
// the node holds a live session (the reference rule, refrule.go). The answer has the set's Count,
// not its Nodes (api.RefsAddRequest.CountOnly; GET /refs has them).
func (l *Coordinator) AddRef(ctx context.Context, resourceID, nodeID string) (api.RefsResponse, error) {
	return l.addRef(ctx, resourceID, nodeID, false)
}

// AddFoundRef is AddRef for a blob the node found present (POST /refs/add
// with found): it is refused with api.ErrDeleting also once a delete of
// the resource has succeeded and no pull or reference has followed it
// (for CompletedTTL), because the node may have seen the deleted file
// through a cache of the shared filesystem.
func (l *Coordinator) AddFoundRef(ctx context.Context, resourceID, nodeID string) (api.RefsResponse, error) {
	return l.addRef(ctx, resourceID, nodeID, true)
}

// addRef decides under the shard mutex (a delete in flight or retained
// refuses the reference) and orders the write there, but waits for the
// write's commit without it, so that the references of many nodes to one
// blob share a commit (docs/design.md §10.2).
// Until the write is durable the reference counts as pending
// (shard.adding): a delete or an update that checks the references
// meanwhile counts it, so the delete rule stays atomic (§8.7). A reference
// that ends a delete's completion is written under the mutex, as it
// changes the in-memory completion too.
func (l *Coordinator) addRef(ctx context.Context, resourceID, nodeID string, found bool) (api.RefsResponse, error) {
	if err := validateResourceID(resourceID); err != nil {
		return api.RefsResponse{}, err
	}
	if err := validateID("node_id", nodeID); err != nil {
		return api.RefsResponse{}, err
	}
	sh := l.shardFor(resourceID)
	sh.mu.Lock()
	r := sh.resources[resourceID]
	var done *completion // a delete's completion that this reference ends
	if r != nil {
		if g := r.keys[idxDelete].holder; g != nil {
			sh.mu.Unlock()
			return api.RefsResponse{}, fmt.Errorf("refs %s: delete by node %s in flight: %w", resourceID, g.nodeID, api.ErrDeleting)
		}
		done = r.keys[idxDelete].completed
		if found && done != nil {
			if err := l.staleView(resourceID, done); err != nil {
				sh.mu.Unlock()
				return api.RefsResponse{}, err
			}
		}
	}
	written, err := l.admitRef(nodeID, resourceID, l.now())
	if err != nil {
		sh.mu.Unlock()
		return api.RefsResponse{}, err
	}
	defer written()
	failpoint.Inject(failpoint.CoordAddRefBefore)
	if done != nil {
		defer sh.mu.Unlock()
		n, err := l.addEndingDelete(ctx, sh, r, resourceID, nodeID)
		if err != nil {
			return api.RefsResponse{}, err
		}
		return api.RefsResponse{ResourceID: resourceID, Count: n}, nil
	}
	wait := l.refs.AddRefOrdered(ctx, resourceID, nodeID)
	sh.addPending(resourceID, nodeID)
	l.noteActivity(sh, resourceID, l.now())
	sh.mu.Unlock()

	commitWait(ctx)
	n, err := wait()
	sh.donePending(resourceID, nodeID)
	if err := l.wrote(ctx, err); err != nil {
		return api.RefsResponse{}, fmt.Errorf("refs %s: %w", resourceID, err)
	}
	failpoint.Inject(failpoint.CoordAddRefAfter)
	return api.RefsResponse{ResourceID: resourceID, Count: n}, nil
}

// addEndingDelete writes node's reference to the resource together with
// the end of the delete completion it ends, and returns the set's size.
// Callers hold the shard mutex.
func (l *Coordinator) addEndingDelete(ctx context.Context, sh *shard, r *resource, resourceID, nodeID string) (int, error) {
	err := l.refs.Commit(ctx, new(refcount.Batch).AddRef(resourceID, nodeID).DropDeleted(resourceID))
	var rc refcount.Set
	if err == nil {
		rc, err = l.refs.Refs(ctx, resourceID)
	}
	if err := l.wrote(ctx, err); err != nil {
		return 0, fmt.Errorf("refs %s: %w", resourceID, err)
	}
	// The resource is in use again, so a later delete must really run.
	r.keys[idxDelete].completed = nil
	sh.tidy(r)
	failpoint.Inject(failpoint.CoordAddRefAfter)
	l.noteActivity(sh, resourceID, l.now())
	return rc.Len(), nil
}

// addPending records node's reference to the resource as written but not
// yet durable. Callers hold the shard mutex, so that no delete decides
// meanwhile.
func (sh *shard) addPending(resourceID, nodeID string) {
	sh.addingMu.Lock()
	defer sh.addingMu.Unlock()
	if sh.adding == nil {
		sh.adding = map[string]map[string]int{}
	}
	p := sh.adding[resourceID]
	if p == nil {
		p = map[string]int{}
		sh.adding[resourceID] = p
	}
	p[nodeID]++
}

// donePending ends what addPending recorded, once the reference is
// durable. It does not need the shard mutex: the thousands of adds that
// one commit ends in a rollout would otherwise each queue for it again,
// ahead of the holder's unlock that wakes the blob's waiters
// (docs/design.md §10.2).
func (sh *shard) donePending(resourceID, nodeID string) {
	sh.addingMu.Lock()
	defer sh.addingMu.Unlock()
	p := sh.adding[resourceID]
	if p[nodeID]--; p[nodeID] <= 0 {
		delete(p, nodeID)
	}
	if len(p) == 0 {
		delete(sh.adding, resourceID)
	}
}

// refsWithPending returns the resource's reference set with the
// references still being written (addRef) in it. Callers hold the
// resource's shard mutex, so no add starts meanwhile. The pending ones
// are read first: one that leaves them (donePending) after that is durable
// before it leaves, so the stored set read next has it.
func (l *Coordinator) refsWithPending(ctx context.Context, resourceID string) (refcount.Set, error) {
	sh := l.shardFor(resourceID)
	sh.addingMu.Lock()
	var pending []string
	for n := range sh.adding[resourceID] {
		pending = append(pending, n)
	}
	sh.addingMu.Unlock()
	rc, err := l.refs.Refs(ctx, resourceID)
	if err != nil {
		return rc, err
	}
	for _, n := range pending {
		rc.Add(n)
	}
	return rc, nil
}

// staleView refuses a node's use of a blob it found present while the
// delete completion c is retained: the node may see the deleted file
// through a cache of the shared filesystem.
func (l *Coordinator) staleView(resourceID string, c *completion) error {
	ago := l.now().Sub(c.at)
	if ago >= l.cfg.CompletedTTL {
		return nil
	}
	what := "deleted by node " + c.nodeID
	if c.lapsed {
		what = "possibly deleted by node " + c.nodeID + " (its delete lease lapsed)"
	}
	return fmt.Errorf("refs %s: %s %s ago; what this node found is a stale view: %w",
		resourceID, what, ago.Round(time.Millisecond), api.ErrDeleting)
}

// Maximum and default page sizes of RefsList.
const (
	maxRefsPage     = api.MaxRefsPage
	defaultRefsPage = api.DefaultRefsPage
)

// RefsList handles GET /refs/list: the reference sets in resource ID order,
// a page at a time (for the reaper and operators).
func (l *Coordinator) RefsList(ctx context.Context, after string, limit int) (api.RefsListResponse, error) {
	if limit <= 0 {
		limit = defaultRefsPage
	}
	limit = min(limit, maxRefsPage)
	// One more than the page says whether another follows.
	page, err := l.refs.ListNodes(ctx, after, limit+1)
	if err != nil {
		return api.RefsListResponse{}, fmt.Errorf("refs list: %w", err)
	}
	var out api.RefsListResponse
	if len(page) > 0 { // an empty page stays "entries": null
		out.Entries = make([]api.RefsEntry, 0, min(len(page), limit))
	}
	if len(page) > limit {
		page = page[:limit]
		out.Next = page[limit-1].ResourceID
	}
	for _, e := range page {
		out.Entries = append(out.Entries, api.RefsEntry{ResourceID: e.ResourceID, Nodes: e.Nodes})
	}
	return out, nil
}

// Refs handles GET /refs: the nodes that reference the resource. It reads
// under the shard mutex, so it never sees an unlock half done (waiters told
// to skip, the holder's reference still being written).
func (l *Coordinator) Refs(ctx context.Context, resourceID string) (api.RefsResponse, error) {
	if err := validateResourceID(resourceID); err != nil {
		return api.RefsResponse{}, err
	}
	sh := l.shardFor(resourceID)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	rc, err := l.refs.Refs(ctx, resourceID)
	if err != nil {
		return api.RefsResponse{}, fmt.Errorf("refs %s: %w", resourceID, err)
	}
	return api.RefsResponse{ResourceID: resourceID, Count: rc.Len(), Nodes: rc.NodeList()}, nil
}
