package lockserver

import "hash/fnv"

// Resources are spread by FNV-1a of their ID alone (docs/design.md §3.1):
// the locks part's shards and the references part's stripes use the same
// index, so the three lock types of one resource, and its references
// still being written, are each under one mutex.

// shardIndex is the shard, of n, of a resource; the references part
// stripes by the same index.
func shardIndex(resourceID string, n int) int {
	return int(hashID(resourceID) % uint32(n))
}

// hashID is FNV-1a of a resource ID.
func hashID(resourceID string) uint32 {
	h := fnv.New32a()
	h.Write([]byte(resourceID))
	return h.Sum32()
}
