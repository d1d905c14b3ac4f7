package synchash

import (
	"crypto/sha256"
	"encoding/binary"
)

// Buckets is the number of buckets a reference set is split into.
const Buckets = 256

// Sum is the hash of a set of resource IDs: how many, and the sum of
// their hashes. The zero Sum is the empty set's.
type Sum struct {
	Count uint64 `json:"count"`
	Hash  uint64 `json:"hash"`
}

// Of returns the bucket and the 64-bit hash of one resource ID.
func Of(resourceID string) (bucket int, h uint64) {
	d := sha256.Sum256([]byte(resourceID))
	return int(d[0]), binary.BigEndian.Uint64(d[:8])
}

// Bucket returns the bucket of a resource ID.
func Bucket(resourceID string) int {
	b, _ := Of(resourceID)
	return b
}

// Table is the hash of a reference set, bucket by bucket. The zero Table
// is the empty set's.
type Table [Buckets]Sum

// Add adds a resource ID to t. Adding an ID t already holds makes t wrong:
// callers add only IDs that were not in the set.
func (t *Table) Add(resourceID string) {
	b, h := Of(resourceID)
	t[b].Count++
	t[b].Hash += h
}

// Remove removes a resource ID that t holds.
func (t *Table) Remove(resourceID string) {
	b, h := Of(resourceID)
	t[b].Count--
	t[b].Hash -= h
}

// Whole returns the hash of the whole set.
func (t *Table) Whole() Sum {
	var s Sum
	for _, b := range t {
		s.Count += b.Count
		s.Hash += b.Hash
	}
	return s
}

// Empty reports whether t is the empty set's.
func (t *Table) Empty() bool { return *t == Table{} }

// Differ returns, in order, the buckets where t and other differ.
func (t *Table) Differ(other *Table) []int {
	var out []int
	for i := range t {
		if t[i] != other[i] {
			out = append(out, i)
		}
	}
	return out
}

// FromIDs returns the table of a set of distinct resource IDs.
func FromIDs(ids []string) *Table {
	t := new(Table)
	for _, id := range ids {
		t.Add(id)
	}
	return t
}
