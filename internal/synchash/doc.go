// Package synchash is the order-independent hash of a node's reference
// set that a sync by hash compares (docs/design.md §10.4):
// the node computes it over its journal, the coordinator keeps it per
// member and changes it on every reference it adds or drops.
//
// A resource ID's hash is the first 8 bytes of the SHA-256 of the ID
// (big-endian); its bucket is the first of those bytes, so a set splits
// into Buckets buckets. A bucket's hash is the count of its IDs and the
// sum (mod 2^64) of their hashes: adding and dropping an ID are one
// addition and one subtraction, in any order. The whole set's hash is the
// count and the sum of every bucket.
package synchash
