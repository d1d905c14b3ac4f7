package lockserver

import "sync"

// DefaultMaxWaitersPerNode bounds the requests one node may have queued
// at once, over every key (docs/design.md §9). A node queues one request per blob it
// pulls while another node holds it: thousands at most.
const DefaultMaxWaitersPerNode = 10000

// nodeCounter counts queued requests per node, under its own mutex (taken
// under a shard's, never before).
type nodeCounter struct {
	limit int

	mu sync.Mutex
	n  map[string]int // protected by mu
}

func newNodeCounter(limit int) *nodeCounter {
	return &nodeCounter{limit: limit, n: map[string]int{}}
}

// tryAdd counts one more for node, unless it has reached the limit.
func (c *nodeCounter) tryAdd(node string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n[node] >= c.limit {
		return false
	}
	c.n[node]++
	return true
}

// done counts one less for node.
func (c *nodeCounter) done(node string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n[node]--; c.n[node] <= 0 {
		delete(c.n, node)
	}
}
