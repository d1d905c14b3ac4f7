package lockserver

import (
	"context"
	"fmt"
	"time"

	"github.com/sharedcontent/sharedcontent/internal/failpoint"
	"github.com/sharedcontent/sharedcontent/lockserver/api"
	"github.com/sharedcontent/sharedcontent/refcount"
)

// addRef decides under the shard mutex (a delete in flight or retained
// refuses the reference) and orders the write there, but waits for the
// write's commit without it, so that the references of many nodes to one
// blob share a commit (docs/design.md §10.2).
// Until the write is durable the reference counts as pending
// (refStripe.adding): a delete or an update that checks the references
// meanwhile counts it, so the delete rule stays atomic (§8.7). A reference
// that ends a delete's completion is written under the mutex, as it
// changes the in-memory completion too.
func (rs *references) addRef(ctx context.Context, resourceID, nodeID string, found bool) (api.RefsResponse, error) {
	if err := validateResourceID(resourceID); err != nil {
		return api.RefsResponse{}, err
	}
	if err := validateID("node_id", nodeID); err != nil {
		return api.RefsResponse{}, err
	}
	h := rs.locks.hold(resourceID)
	if node, ok := h.deleting(); ok {
		h.release()
		return api.RefsResponse{}, fmt.Errorf("refs %s: delete by node %s in flight: %w", resourceID, node, api.ErrDeleting)
	}
	done := h.deleted() // a delete's completion that this reference ends
	if found && done != nil {
		if err := rs.staleView(resourceID, done); err != nil {
			h.release()
			return api.RefsResponse{}, err
		}
	}
	written, err := rs.members.admitRef(nodeID, resourceID, rs.now())
	if err != nil {
		h.release()
		return api.RefsResponse{}, err
	}
	defer written()
	failpoint.Inject(failpoint.CoordAddRefBefore)
	if done != nil {
		defer h.release()
		n, err := rs.addEndingDelete(ctx, h, resourceID, nodeID)
		if err != nil {
			return api.RefsResponse{}, err
		}
		return api.RefsResponse{ResourceID: resourceID, Count: n}, nil
	}
	st := rs.stripe(resourceID)
	wait := rs.store.refs.AddRefOrdered(ctx, resourceID, nodeID)
	st.addPending(resourceID, nodeID)
	rs.noteActivity(resourceID, rs.now())
	h.release()

	commitWait(ctx)
	n, err := wait()
	st.donePending(resourceID, nodeID)
	if err := rs.store.wrote(ctx, err); err != nil {
		return api.RefsResponse{}, fmt.Errorf("refs %s: %w", resourceID, err)
	}
	failpoint.Inject(failpoint.CoordAddRefAfter)
	return api.RefsResponse{ResourceID: resourceID, Count: n}, nil
}

// addEndingDelete writes node's reference to the resource together with
// the end of the delete completion it ends, and returns the set's size.
// Callers hold the resource (h).
func (rs *references) addEndingDelete(ctx context.Context, h heldResource, resourceID, nodeID string) (int, error) {
	err := rs.store.refs.Commit(ctx, new(refcount.Batch).AddRef(resourceID, nodeID).DropDeleted(resourceID))
	var rc refcount.Set
	if err == nil {
		rc, err = rs.store.refs.Refs(ctx, resourceID)
	}
	if err := rs.store.wrote(ctx, err); err != nil {
		return 0, fmt.Errorf("refs %s: %w", resourceID, err)
	}
	// The resource is in use again, so a later delete must really run.
	h.endDeleted()
	failpoint.Inject(failpoint.CoordAddRefAfter)
	rs.noteActivity(resourceID, rs.now())
	return rc.Len(), nil
}

// addPending records node's reference to the resource as written but not
// yet durable. Callers hold the resource's shard mutex, so that no delete
// decides meanwhile.
func (st *refStripe) addPending(resourceID, nodeID string) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.adding == nil {
		st.adding = map[string]map[string]int{}
	}
	p := st.adding[resourceID]
	if p == nil {
		p = map[string]int{}
		st.adding[resourceID] = p
	}
	p[nodeID]++
}

// donePending ends what addPending recorded, once the reference is
// durable. It does not need the shard mutex: the thousands of adds that
// one commit ends in a rollout would otherwise each queue for it again,
// ahead of the holder's unlock that wakes the blob's waiters
// (docs/design.md §10.2).
func (st *refStripe) donePending(resourceID, nodeID string) {
	st.mu.Lock()
	defer st.mu.Unlock()
	p := st.adding[resourceID]
	if p[nodeID]--; p[nodeID] <= 0 {
		delete(p, nodeID)
	}
	if len(p) == 0 {
		delete(st.adding, resourceID)
	}
}

// refsWithPending returns the resource's reference set with the
// references still being written (addRef) in it. Callers hold the
// resource's shard mutex, so no add starts meanwhile. The pending ones
// are read first: one that leaves them (donePending) after that is durable
// before it leaves, so the stored set read next has it.
func (rs *references) refsWithPending(ctx context.Context, resourceID string) (refcount.Set, error) {
	st := rs.stripe(resourceID)
	st.mu.Lock()
	var pending []string
	for n := range st.adding[resourceID] {
		pending = append(pending, n)
	}
	st.mu.Unlock()
	rc, err := rs.store.refs.Refs(ctx, resourceID)
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
func (rs *references) staleView(resourceID string, c *completion) error {
	ago := rs.now().Sub(c.at)
	if ago >= rs.cfg.CompletedTTL {
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
func (rs *references) RefsList(ctx context.Context, after string, limit int) (api.RefsListResponse, error) {
	if limit <= 0 {
		limit = defaultRefsPage
	}
	limit = min(limit, maxRefsPage)
	// One more than the page says whether another follows.
	page, err := rs.store.refs.ListNodes(ctx, after, limit+1)
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
func (rs *references) Refs(ctx context.Context, resourceID string) (api.RefsResponse, error) {
	if err := validateResourceID(resourceID); err != nil {
		return api.RefsResponse{}, err
	}
	h := rs.locks.hold(resourceID)
	defer h.release()
	rc, err := rs.store.refs.Refs(ctx, resourceID)
	if err != nil {
		return api.RefsResponse{}, fmt.Errorf("refs %s: %w", resourceID, err)
	}
	return api.RefsResponse{ResourceID: resourceID, Count: rc.Len(), Nodes: rc.NodeList()}, nil
}
