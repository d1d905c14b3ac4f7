package lockserver

import (
	"context"
	"time"

	"github.com/sharedcontent/sharedcontent/lockserver/api"
)

// watcherBuffer bounds the events queued for one watcher of a key; a
// watcher that falls this far behind is disconnected and must re-subscribe.
// A stream that follows one request gets at most one event, its outcome.
const watcherBuffer = 64

// Subscription is one /lock/subscribe stream. With a request_id it follows
// that request and gets only its outcome: granted (with the lease),
// completed (skip) or error, after which the stream ends. A request that
// already has its outcome (or is unknown) gets only First. Without a
// request_id it watches the key and gets every event until it closes.
//
// Events are delivered without blocking the Coordinator: the channel is closed
// when the subscription ends (an outcome, Close, Coordinator.Close, or a watcher
// that fell behind).
type Subscription struct {
	// First is the state of the key, and of the request, at subscription
	// time: nothing that happened before Subscribe is missed.
	First api.StatusResponse

	locks     *locks
	typ       typeIndex
	id        string
	nodeID    string
	requestID string
	events    chan api.Event
	ended     bool // protected by the shard mutex
}

// Events returns the stream of events after First.
func (s *Subscription) Events() <-chan api.Event { return s.events }

// RequestID is the request the subscription follows; empty when it
// watches a key. A stream that follows a request ends after its outcome.
func (s *Subscription) RequestID() string { return s.requestID }

// send delivers ev without blocking. Called with the shard mutex held; a nil
// subscription is a stream-less waiter.
func (s *Subscription) send(ev api.Event) {
	if s == nil || s.ended {
		return
	}
	select {
	case s.events <- ev:
	default:
		s.end()
	}
}

// finish delivers a waiter's outcome (granted, completed or error) and
// ends its stream: the outcome is the last event a request's stream
// carries, and ending it lets the client reuse the connection. Called with
// the shard mutex held.
func (s *Subscription) finish(ev api.Event) {
	s.send(ev)
	s.end()
}

// end closes the event channel. Called with the shard mutex held.
func (s *Subscription) end() {
	if s == nil || s.ended {
		return
	}
	s.ended = true
	close(s.events)
}

// Subscribe opens an event stream for (typ, resourceID), following the
// request (nodeID, requestID) when requestID is not empty. The caller must
// Close it.
func (lk *locks) Subscribe(typ api.OperationType, resourceID, nodeID, requestID string) (*Subscription, error) {
	t, err := validateQuery(typ, resourceID, nodeID, requestID)
	if err != nil {
		return nil, err
	}
	now := lk.now()
	sh := lk.shardFor(resourceID)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	r := sh.resource(resourceID)
	k := &r.keys[t]
	buffer := 1
	if requestID == "" {
		buffer = watcherBuffer
	}
	s := &Subscription{locks: lk, typ: t, id: resourceID, nodeID: nodeID, requestID: requestID, events: make(chan api.Event, buffer)}
	// A stream following one request needs its own state, not the head
	// of the queue.
	s.First = lk.status(r, t, nodeID, requestID, requestID == "", now)
	select {
	case <-lk.stop:
		s.end()
		return s, nil
	default:
	}
	if requestID == "" {
		if k.watchers == nil {
			k.watchers = make(map[*Subscription]struct{})
		}
		k.watchers[s] = struct{}{}
	} else if w := k.queue.Get(nodeID, requestID); w != nil {
		w.sub.end() // a newer stream replaces an older one
		w.sub = s
	} else {
		// Acquired, skipped, refused, or unknown: First says which and
		// nothing follows.
		s.end()
		sh.tidy(r)
	}
	return s, nil
}

// Close ends the subscription. A waiter whose stream closes leaves its
// queue at once (docs/design.md §3.6); a holder keeps its grant, which its lease bounds.
func (s *Subscription) Close() {
	sh := s.locks.shardFor(s.id)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	r := sh.resources[s.id]
	if r == nil {
		s.end()
		return
	}
	k := &r.keys[s.typ]
	if s.requestID == "" {
		delete(k.watchers, s)
	} else if w := k.queue.Get(s.nodeID, s.requestID); w != nil && w.sub == s {
		s.locks.dropWaiter(k, w)
	}
	s.end()
	sh.tidy(r)
}

// Claimed records that the grant this subscription was sent has reached
// its holder, so the claim timeout does not apply.
func (s *Subscription) Claimed(leaseID string) {
	sh := s.locks.shardFor(s.id)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if r := sh.resources[s.id]; r != nil {
		if g := r.keys[s.typ].holder; g != nil && g.leaseID == leaseID {
			g.claimed = true
		}
	}
}

// Status handles GET /lock/status. Naming a request_id also reports that
// request's own state, counts as a poll that keeps a stream-less waiter in
// its queue, and claims a grant made to it.
// It never blocks; ctx is there for the Transport interface of lockclient.
func (lk *locks) Status(_ context.Context, typ api.OperationType, resourceID, nodeID, requestID string) (api.StatusResponse, error) {
	t, err := validateQuery(typ, resourceID, nodeID, requestID)
	if err != nil {
		return api.StatusResponse{}, err
	}
	sh := lk.shardFor(resourceID)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	r := sh.resources[resourceID]
	if r == nil {
		r = &resource{id: resourceID}
	}
	return lk.status(r, t, nodeID, requestID, true, lk.now()), nil
}

// status snapshots r.keys[t], with the head of the queue when withQueue.
// Its size is bounded whatever the queue's length (docs/design.md §10.3). Called with
// the shard mutex held.
//
// Request IDs are shown only to their own node (nodeID): with a request ID
// and its node, the lease of a grant can be had (docs/design.md §9).
func (lk *locks) status(r *resource, t typeIndex, nodeID, requestID string, withQueue bool, now time.Time) api.StatusResponse {
	k := &r.keys[t]
	st := api.StatusResponse{Type: typeNames[t], ResourceID: r.id, Queue: []api.Waiter{}, QueueLength: k.queue.Len()}
	own := func(q *request) string {
		if nodeID != "" && q.nodeID == nodeID {
			return q.requestID
		}
		return ""
	}
	if g := k.holder; g != nil {
		st.Holder = &api.Holder{NodeID: g.nodeID, RequestID: own(&g.request), Fence: g.fence,
			AcquiredAt: g.acquired.UTC().Format(time.RFC3339Nano), Claimed: g.claimed}
	}
	completed := k.completed != nil && now.Sub(k.completed.at) < lk.cfg.CompletedTTL
	if completed {
		st.Completed = &api.Completion{NodeID: k.completed.nodeID, CompletedAt: k.completed.at.UTC().Format(time.RFC3339Nano),
			Fence: k.completed.fence, Lapsed: k.completed.lapsed}
	}
	if withQueue {
		for _, w := range k.queue.Head(api.StatusQueueHead) {
			st.Queue = append(st.Queue, api.Waiter{NodeID: w.nodeID, RequestID: own(&w.request), QueuedAt: w.queued.UTC().Format(time.RFC3339Nano)})
		}
	}
	if requestID == "" {
		return st
	}
	req := &api.LockResponse{RequestID: requestID}
	switch w := k.queue.Get(nodeID, requestID); {
	case w != nil:
		w.lastSeen = now
		req.Queued, req.Position = true, k.queue.Position(w)
	case k.holder != nil && k.holder.is(nodeID, requestID):
		k.holder.claimed = true
		*req = k.holder.response(lk.cfg.LeaseTTL)
	case completed:
		req.Skip = true
		_, req.RefAdded = k.completed.refs[requestKey{nodeID, requestID}]
	}
	st.Request = req
	return st
}

// event builds an event of r.keys[t].
func (r *resource) event(t typeIndex, name, node, requestID string, success bool, reason string) api.Event {
	return api.Event{Name: name, Type: typeNames[t], ResourceID: r.id, NodeID: node, RequestID: requestID, Success: success, Reason: reason}
}

// notifyWatchers sends an event to every watcher of r.keys[t]. Watchers
// see which node an event is about, not its request ID.
func (lk *locks) notifyWatchers(r *resource, t typeIndex, name, node string, success bool, reason string) {
	k := &r.keys[t]
	if len(k.watchers) == 0 {
		return
	}
	ev := r.event(t, name, node, "", success, reason)
	for s := range k.watchers {
		s.send(ev)
		if s.ended {
			delete(k.watchers, s)
		}
	}
}
