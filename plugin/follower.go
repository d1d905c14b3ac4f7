package plugin

import (
	"context"
	"sync/atomic"

	"github.com/containerd/containerd/v2/core/content"

	"github.com/sharedcontent/sharedcontent/contentv2"
)

// The follower through the proxy (docs/design.md §5.4 holds the
// proof, with containerd's lines).
//
// containerd's contentserver calls the writer's Status before it answers
// every message of a Write stream. The first message is the proxy client's
// negotiation STAT, sent while containerd's metadata transaction is open,
// so that first Status must not wait; the client keeps the offset of its
// answer (0) for every later Write and for Commit. The second message is
// fetch's own STAT, sent outside any transaction: that is where a
// follower waits. So the store is served with writers whose first Status
// answers at once (StatusNow) and whose later ones are the follower's own.

// followingStore serves a store's followers to containerd's contentserver.
type followingStore struct{ content.Store }

// following wraps cs for the contentserver.
func following(cs content.Store) content.Store { return followingStore{cs} }

func (s followingStore) Writer(ctx context.Context, opts ...content.WriterOpt) (content.Writer, error) {
	w, err := s.Store.Writer(ctx, opts...)
	if f, ok := w.(contentv2.Follower); ok && err == nil {
		return &negotiatedFollower{Follower: f}, nil
	}
	return w, err
}

// negotiatedFollower answers the negotiation without waiting.
type negotiatedFollower struct {
	contentv2.Follower
	negotiated atomic.Bool // set by the first Status
}

func (w *negotiatedFollower) Status() (content.Status, error) {
	if w.negotiated.CompareAndSwap(false, true) {
		return w.StatusNow()
	}
	return w.Follower.Status()
}
