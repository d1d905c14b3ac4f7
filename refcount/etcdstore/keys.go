package etcdstore

import (
	"encoding/binary"
	"fmt"
	"strconv"
	"strings"

	"github.com/containerd/errdefs"

	"github.com/sharedcontent/sharedcontent/internal/synchash"
)

// The key layout under the store's prefix (docs/design.md §7). A
// reference is two empty-valued keys, one per direction, so that adding
// one never rewrites a list, a set is read (or counted) with one range,
// and a node's references are read without scanning every set. NUL
// separates the two IDs of a reference's keys: it sorts below every other
// byte, so a set's keys are contiguous and sets come in resource ID order,
// and an ID may not contain it.
const (
	refsDir     = "refs/"     // refs/<resource>\x00<node> → "": node references resource
	nodesDir    = "nodes/"    // nodes/<node>\x00<bucket><resource> → "": the same reference, by node
	membersDir  = "members/"  // members/<node> → JSON refcount.Member
	metaDir     = "meta/"     // meta/<key> → 8-byte big-endian uint64, or a string
	deletingDir = "deleting/" // deleting/<resource> → JSON refcount.DeleteMarker
	deletedDir  = "deleted/"  // deleted/<resource> → JSON refcount.DeleteCompletion
	leasesDir   = "leases/"   // leases/<resource>\x00<lease ID> → JSON refcount.LeaseRecord
	pinsDir     = "pins/"     // pins/<name> → JSON refcount.PinRecord
	identityKey = "identity"  // JSON refcount.Identity
	fenceKey    = "fence"     // the fence high-water mark: 8-byte big-endian uint64
	sep         = "\x00"
)

// keys builds the keys of one store.
type keys struct{ prefix string }

func (k keys) ref(resourceID, node string) string {
	return k.prefix + refsDir + resourceID + sep + node
}

// set is the prefix of a resource's reference keys.
func (k keys) set(resourceID string) string { return k.prefix + refsDir + resourceID + sep }

// index is the key of a reference by node: the resource ID follows its
// bucket (synchash.Bucket, two hex digits), so that the node's references
// in one bucket, what a ReplaceNodeBuckets replaces, are one range.
func (k keys) index(node, resourceID string) string {
	return k.nodeBucket(node, synchash.Bucket(resourceID)) + resourceID
}

// node is the prefix of a node's index keys.
func (k keys) node(node string) string { return k.prefix + nodesDir + node + sep }

// nodeBucket is the prefix of a node's index keys in one bucket.
func (k keys) nodeBucket(node string, bucket int) string {
	return fmt.Sprintf("%s%02x", k.node(node), bucket)
}

// indexResource returns the resource ID of the rest of an index key after
// its node's prefix.
func indexResource(rest string) string { return rest[2:] }

// indexBucket returns the bucket of the rest of an index key after its
// node's prefix (its two hex digits; -1 if they are not).
func indexBucket(rest string) int {
	b, err := strconv.ParseUint(rest[:2], 16, 8)
	if err != nil {
		return -1
	}
	return int(b)
}

func (k keys) member(id string) string     { return k.prefix + membersDir + id }
func (k keys) meta(key string) string      { return k.prefix + metaDir + key }
func (k keys) deleting(id string) string   { return k.prefix + deletingDir + id }
func (k keys) deleted(id string) string    { return k.prefix + deletedDir + id }
func (k keys) pin(name string) string      { return k.prefix + pinsDir + name }
func (k keys) dir(dir string) string       { return k.prefix + dir }
func (k keys) identity() string            { return k.prefix + identityKey }
func (k keys) fence() string               { return k.prefix + fenceKey }
func (k keys) trim(dir, key string) string { return strings.TrimPrefix(key, k.prefix+dir) }

// lease is the key of a lease record: a drop names one lease of the
// resource, and a resource's records are one range.
func (k keys) lease(id, lease string) string { return k.prefix + leasesDir + id + sep + lease }

// splitPair splits the rest of a reference or index key (after its
// directory) into its two IDs.
func splitPair(rest string) (first, second string, ok bool) {
	return strings.Cut(rest, sep)
}

// checkID refuses an ID that cannot be a key part: one holding NUL.
func checkID(what, id string) error {
	if strings.Contains(id, sep) {
		return fmt.Errorf("etcdstore: %s %q holds a NUL byte: %w", what, id, errdefs.ErrInvalidArgument)
	}
	return nil
}

func encodeUint64(v uint64) string {
	return string(binary.BigEndian.AppendUint64(nil, v))
}

func decodeUint64(key string, b []byte) (uint64, error) {
	if len(b) != 8 {
		return 0, fmt.Errorf("etcdstore: %s: stored value is %d bytes, want 8: %w", key, len(b), errdefs.ErrDataLoss)
	}
	return binary.BigEndian.Uint64(b), nil
}
