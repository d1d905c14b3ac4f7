package lockserver

import (
	"context"
	"fmt"
	"slices"
	"strings"
)

// Dump renders everything a request could change, one sorted line per
// fact: locks, queues, completions, remembered releases, members,
// references, the cluster's identity and what a restart would load. Two
// dumps are equal when nothing changed in between (and no timer fired);
// the HTTP tests check with it that a refused request changed nothing.
func (c *Coordinator) Dump(ctx context.Context) (string, error) {
	var lines []string
	for i, sh := range c.locks.shards {
		sh.mu.Lock()
		for id, r := range sh.resources {
			for ti := range r.keys {
				k := &r.keys[ti]
				if g := k.holder; g != nil {
					lines = append(lines, fmt.Sprintf("holder %s %d %s %s %s %d %v %v", id, ti, g.nodeID, g.requestID, g.leaseID, g.fence, g.expires.UnixNano(), g.claimed))
				}
				k.queue.Each(func(w *waiter) bool {
					lines = append(lines, fmt.Sprintf("waiter %s %d %s %s %d", id, ti, w.nodeID, w.requestID, w.lastSeen.UnixNano()))
					return true
				})
				if done := k.completed; done != nil {
					lines = append(lines, fmt.Sprintf("completed %s %d %s", id, ti, done.nodeID))
				}
			}
		}
		lines = append(lines, fmt.Sprintf("shard %d released %d", i, len(sh.released)))
		sh.mu.Unlock()
	}
	c.mmu.Lock()
	for id, m := range c.members {
		lines = append(lines, fmt.Sprintf("member %s %v %v %v", id, m.synced, m.sessionUntil.UnixNano(), m.sync != nil))
	}
	c.mmu.Unlock()
	refs, err := c.RefsList(ctx, "", maxRefsPage)
	if err != nil {
		return "", err
	}
	for _, e := range refs.Entries {
		lines = append(lines, fmt.Sprintf("refs %s %v", e.ResourceID, e.Nodes))
	}
	cl := c.Cluster()
	lines = append(lines, fmt.Sprintf("cluster %s %d", cl.ClusterID, cl.Epoch))
	// What a restart would load: persisted members and deletes.
	ms, err := c.state.ListMembers(ctx)
	if err != nil {
		return "", err
	}
	for _, m := range ms {
		lines = append(lines, fmt.Sprintf("persisted member %s %v", m.ID, m.FirstSeen.UnixNano()))
	}
	d, err := c.state.Deletes(ctx)
	if err != nil {
		return "", err
	}
	for id, m := range d.InFlight {
		lines = append(lines, fmt.Sprintf("persisted deleting %s %s %d", id, m.Node, m.Fence))
	}
	for id, done := range d.Completed {
		lines = append(lines, fmt.Sprintf("persisted deleted %s %s %v", id, done.Node, done.Lapsed))
	}
	if h := c.locks.reaper(); h != nil {
		lines = append(lines, fmt.Sprintf("reaper %s %s %d", h.node, h.leaseID, h.expires.UnixNano()))
	}
	slices.Sort(lines)
	return strings.Join(lines, "\n"), nil
}
