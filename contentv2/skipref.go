package contentv2

import (
	"context"
	"errors"

	"github.com/containerd/log"
	"github.com/opencontainers/go-digest"
)

// A follower's skip that adds its reference (docs/design.md §10.6, lever
// c; opt-in, WithSkipAddsRef). A follower that waits for a blob's holder asks the coordinator to
// record this node's reference with the skip that ends its wait
// (api.LockRequest.AddRef): the coordinator writes the references of the
// whole queue with the holder's success, in one commit, instead of one
// POST /refs/add per waiter right after the wake-up. Reference before use
// (§8.1) holds as for AddRef: the blob is in this node's journal before
// the request that asks for it is sent. A skip without the reference (a
// coordinator that does not know the field, one that refused it) leaves
// the follower to add it as before (use). A wait that ends otherwise (the
// lock handed to this node, which then commits the blob, or an error)
// leaves the journal entry, as a reference that could not be recorded
// does: the next sync sends it, and the reaper drops a reference to a
// blob that is gone.

// ErrRefAdded is wrapped, with api.ErrSkipped, in the error Lock returns
// for a pull answered skip when the coordinator recorded this node's
// reference to the blob with it, as the request asked
// (api.LockRequest.AddRef).
var ErrRefAdded = errors.New("this node's reference recorded with the skip")

// WithSkipAddsRef sets whether a follower asks the coordinator to record
// its reference with the skip that ends its wait (lever c of
// docs/design.md §10.6). Off by default: the 2,600-node rollout that left
// 312 nodes unfinished with it on was very likely a holder's lease never
// given back (fixed), but measured since, it did not take a rollout's
// /refs/add away (§10.6); off, a follower adds its reference itself after
// the skip, as before.
func WithSkipAddsRef(on bool) Option { return func(s *store) { s.skipAddsRef = on } }

// journalAhead journals dgst before a follower's pull lock asks for its
// reference with the skip, and reports whether to ask (not when the
// option is off, the reference is known, or the journal cannot be
// written) and whether the blob is new to this node (fresh).
func (s *store) journalAhead(ctx context.Context, dgst digest.Digest) (ask, fresh bool) {
	if !s.skipAddsRef {
		return false, false
	}
	s.mu.Lock()
	_, known := s.referenced[dgst]
	s.mu.Unlock()
	if known {
		return false, false
	}
	fresh = !s.journal.has(dgst)
	if err := s.journal.add(dgst); err != nil {
		log.G(ctx).WithError(err).WithField("digest", dgst).Warn("node journal: the follower adds its reference after the skip")
		return false, false
	}
	return true, fresh
}

// tookRef records that the coordinator holds this node's reference to
// dgst, recorded with a skip it asked for; fresh counts the blob's bytes
// as shared.
func (s *store) tookRef(ctx context.Context, dgst digest.Digest, fresh bool) {
	s.mu.Lock()
	s.referenced[dgst] = struct{}{}
	s.mu.Unlock()
	s.metrics.skipRefs.Inc()
	if !fresh {
		return
	}
	if info, err := s.local.Info(ctx, dgst); err == nil {
		s.metrics.sharedBytes.Add(float64(info.Size))
	}
}
