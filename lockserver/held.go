package lockserver

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/sharedcontent/sharedcontent/lockserver/api"
)

// Held lists the locks of one type held now, for operators
// (`sharedcontentctl top`, docs/design.md §5.10): with type pull, the
// cluster's in-flight downloads, each with its holder and the head of its
// queue (the nodes waiting for it). The walk stays in the locks part: one
// shard at a time under its mutex, so it never holds two and a lock
// request waits at most for one shard's snapshot. The answer is bounded
// (api.HeldLocksMax entries, api.StatusQueueHead waiters each; Total and
// QueueLength count them all) and sorted oldest grant first.
func (lk *locks) Held(_ context.Context, typ api.OperationType) (api.HeldLocksResponse, error) {
	if typ == "" {
		typ = api.OperationPull
	}
	t, ok := indexOf(typ)
	if !ok {
		return api.HeldLocksResponse{}, fmt.Errorf("held locks: type %q: want pull, update or delete: %w", typ, api.ErrInvalidArgument)
	}
	type heldLock struct {
		since time.Time
		st    api.StatusResponse
	}
	var all []heldLock
	now := lk.now()
	for _, sh := range lk.shards {
		sh.mu.Lock()
		for _, r := range sh.resources {
			if g := r.keys[t].holder; g != nil {
				all = append(all, heldLock{g.acquired, lk.status(r, t, "", "", true, now)})
			}
		}
		sh.mu.Unlock()
	}
	sort.Slice(all, func(i, j int) bool {
		if !all[i].since.Equal(all[j].since) {
			return all[i].since.Before(all[j].since)
		}
		return all[i].st.ResourceID < all[j].st.ResourceID
	})
	resp := api.HeldLocksResponse{Type: typ, Total: len(all), Locks: make([]api.StatusResponse, 0, min(len(all), api.HeldLocksMax))}
	for _, h := range all[:min(len(all), api.HeldLocksMax)] {
		resp.Locks = append(resp.Locks, h.st)
	}
	return resp, nil
}
