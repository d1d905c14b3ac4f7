package lockserver

import (
	"fmt"
	"time"

	"github.com/sharedcontent/sharedcontent/lockserver/api"
)

// A cancel can overtake its own request. A client whose context ends while
// its POST /lock is in flight gives the request back at once (Cancel), on
// another connection; when that cancel is served first it finds nothing,
// and the lock request that follows would be granted to a caller that has
// gone. Its lease then holds the key until it expires, a lease TTL during
// which every other node waits (docs/design.md §3.4). So a cancel that
// finds nothing leaves a tombstone, and a lock request that meets its
// tombstone is refused instead of granted or queued.
//
// A tombstone lasts a lease TTL, the longest a stray grant would have held
// the key; a request that arrives later than that has been given up by its
// client's own deadline long before. Each shard keeps at most
// maxCancelledPerShard: past that a cancel of an unknown request is not
// remembered, as before (the cost is one lease TTL's wait, not a wrong
// answer).

// maxCancelledPerShard bounds the tombstones of a shard: cancels that find
// nothing are rare (a race with the request itself), and a client sending
// a flood of them must not grow the coordinator.
const maxCancelledPerShard = 1024

// cancelKey names one request of one key.
type cancelKey struct {
	typ                         typeIndex
	resourceID, node, requestID string
}

// noteCancelled records, with sh.mu held, that the request named by k was
// cancelled before the coordinator saw it.
func (sh *shard) noteCancelled(k cancelKey, now time.Time) {
	if sh.cancelled == nil {
		sh.cancelled = make(map[cancelKey]int64)
	}
	if len(sh.cancelled) < maxCancelledPerShard {
		sh.cancelled[k] = now.UnixNano()
	}
}

// refuseCancelled fails, with sh.mu held, a lock request whose cancel came
// first.
func (sh *shard) refuseCancelled(t typeIndex, req api.LockRequest) error {
	if _, ok := sh.cancelled[cancelKey{t, req.ResourceID, req.NodeID, req.RequestID}]; !ok {
		return nil
	}
	return fmt.Errorf("%s %s: request %s was cancelled before it arrived; a new attempt needs a new request ID: %w",
		typeNames[t], req.ResourceID, req.RequestID, api.ErrInvalidArgument)
}

// forgetCancelled drops, with sh.mu held, the tombstones older than before
// (UnixNano).
func (sh *shard) forgetCancelled(before int64) {
	for k, at := range sh.cancelled {
		if at < before {
			delete(sh.cancelled, k)
		}
	}
	if len(sh.cancelled) == 0 {
		sh.cancelled = nil // give the buckets back
	}
}
