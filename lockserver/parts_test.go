package lockserver

import "time"

// sweepOf runs, at now, the sweep of the shard of resourceID.
func (c *Coordinator) sweepOf(resourceID string, now time.Time) {
	c.locks.sweep(shardIndex(resourceID, len(c.locks.shards)), now)
}
