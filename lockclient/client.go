package lockclient

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sharedcontent/sharedcontent/lockserver/api"
)

// Client takes locks from one coordinator on behalf of one node. It is safe
// for concurrent use; every call is independent and takes its own request
// ID.
//
// A Client owns the keepalive goroutines of the leases it hands out: each
// stops at Unlock of its lease, or at Close.
type Client struct {
	transport Transport
	http      *httpTransport // the transport when remote; nil when embedded
	opts      options        // read-only after construction

	expect atomic.Pointer[string] // the cluster ID given to ExpectCluster
	// pauses counts the pauses retry took between attempts (tests).
	pauses atomic.Int64

	mu     sync.Mutex
	leases map[*Lease]struct{} // protected by mu: leases whose keepalive runs
	closed bool                // protected by mu
}

// New returns a Client of the coordinator at serverURL
// (http(s)://host:port, optionally with a path prefix), or of the
// coordinator whose replicas serverURL lists, comma-separated
// (docs/design.md §7): the Client then sticks to the one that leads,
// follows a standby's not_leader hint at once when it names a listed URL,
// and moves to the next URL after a transient failure (replicas.go).
// ParseURLs says what a list may hold. New does not connect: an
// unreachable coordinator shows in the first call.
func New(serverURL string, opts ...Option) (*Client, error) {
	o, err := buildOptions(opts)
	if err != nil {
		return nil, err
	}
	b, err := newHTTPTransport(serverURL, &o)
	if err != nil {
		return nil, err
	}
	c := newClient(b, o)
	c.http = b
	return c, nil
}

// NewEmbedded returns a Client of an in-process coordinator, typically the
// *lockserver.Coordinator of an embedded coordinator (or any other Transport).
// Results, errors, leases and keepalive behave as with New; the HTTP options
// (clients, token, TLS, poll interval) do not apply.
func NewEmbedded(b Transport, opts ...Option) (*Client, error) {
	if b == nil {
		return nil, fmt.Errorf("lockclient: nil coordinator: %w", api.ErrInvalidArgument)
	}
	o, err := buildOptions(opts)
	if err != nil {
		return nil, err
	}
	return newClient(b, o), nil
}

func buildOptions(opts []Option) (options, error) {
	o := defaultOptions()
	for _, opt := range opts {
		opt(&o)
	}
	if o.nodeID == "" {
		h, err := os.Hostname()
		if err != nil {
			return o, fmt.Errorf("lockclient: no node ID given and no host name: %w", err)
		}
		o.nodeID = h
	}
	return o, o.validate()
}

func newClient(b Transport, o options) *Client {
	return &Client{transport: b, opts: o, leases: make(map[*Lease]struct{})}
}

// NodeID returns the node this client speaks for.
func (c *Client) NodeID() string { return c.opts.nodeID }

// Close stops the keepalive of every lease not yet unlocked (the
// coordinator then releases them as failures when their TTL runs out) and
// closes idle connections. Calls in flight are not interrupted; new Lock and
// TryLock calls fail with api.ErrUnavailable. Close is idempotent.
func (c *Client) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	leases := c.leases
	c.leases = nil
	c.mu.Unlock()
	for l := range leases {
		l.stop()
	}
	if c.http != nil {
		c.http.closeIdle()
	}
	return nil
}

// Status returns the state of the lock (typ, resourceID): holder,
// retained completion and queue. Transient errors are retried.
func (c *Client) Status(ctx context.Context, typ api.OperationType, resourceID string) (*api.StatusResponse, error) {
	var st api.StatusResponse
	err := c.retry(ctx, call{op: "status", typ: typ, id: resourceID}, func(ctx context.Context) error {
		var err error
		st, err = c.transport.Status(ctx, typ, resourceID, c.opts.nodeID, "")
		return err
	})
	if err != nil {
		return nil, err
	}
	return &st, nil
}

// AddRef adds this client's node's reference to the resource (for example
// a blob it is about to commit). It fails with api.ErrDeleting while a delete of
// the resource is in flight. Transient errors are retried (adding a
// reference is idempotent). The answer has the set's Count but not its
// Nodes (api.RefsAddRequest.CountOnly): Refs returns them.
func (c *Client) AddRef(ctx context.Context, resourceID string) (api.RefsResponse, error) {
	return c.addRef(ctx, resourceID, c.transport.AddRef)
}

// AddFoundRef is AddRef for a resource this node found present (a blob in
// the shared directory): it fails with api.ErrDeleting also when a delete of
// the resource succeeded since its last pull or reference, because what
// the node found may be a cached view of the deleted file.
func (c *Client) AddFoundRef(ctx context.Context, resourceID string) (api.RefsResponse, error) {
	return c.addRef(ctx, resourceID, c.transport.AddFoundRef)
}

func (c *Client) addRef(ctx context.Context, resourceID string, add func(ctx context.Context, resourceID, nodeID string) (api.RefsResponse, error)) (api.RefsResponse, error) {
	var refs api.RefsResponse
	err := c.retry(ctx, call{op: "add reference", id: resourceID}, func(ctx context.Context) error {
		var err error
		refs, err = add(ctx, resourceID, c.opts.nodeID)
		return err
	})
	return refs, err
}

// Refs returns the resource's reference set: the nodes that use it.
// Transient errors are retried.
func (c *Client) Refs(ctx context.Context, resourceID string) (api.RefsResponse, error) {
	var refs api.RefsResponse
	err := c.retry(ctx, call{op: "references", id: resourceID}, func(ctx context.Context) error {
		var err error
		refs, err = c.transport.Refs(ctx, resourceID)
		return err
	})
	return refs, err
}

// ExpectCluster makes every later request name the cluster id, so that a
// coordinator of another cluster (one that lost its database, or serves
// other nodes) refuses it with api.ErrWrongCluster instead of acting on it
// (docs/design.md §8.10). An embedded coordinator checks it on Session only:
// it cannot change under a running process except by adoption.
func (c *Client) ExpectCluster(id string) {
	c.expect.Store(&id)
	if c.http != nil {
		c.http.cluster.Store(&id)
	}
}

// Session opens or renews this client's node's session: req's InstanceID and
// Echo (docs/design.md §8.8) are sent as given, its NodeID is the client's,
// and its ClusterID the expected one (ExpectCluster). Transient errors are
// retried with the same request: an echo's elapsed time then dates from the
// first attempt, which only makes the coordinator's estimate of its age
// larger.
func (c *Client) Session(ctx context.Context, req api.SessionRequest) (api.SessionResponse, error) {
	req.NodeID = c.opts.nodeID
	if id := c.expect.Load(); id != nil {
		req.ClusterID = *id
	}
	var resp api.SessionResponse
	err := c.retry(ctx, call{op: "session", id: c.opts.nodeID}, func(ctx context.Context) error {
		var err error
		resp, err = c.transport.Session(ctx, req)
		return err
	})
	if h, ok := c.transport.(nodeStreamHolder); ok && err == nil && c.opts.sessionStream {
		h.holdNodeStream(c.opts.nodeID)
	}
	return resp, err
}

// nodeStreamHolder is a Transport whose node event stream the node's
// session holds open (docs/design.md §10.6).
type nodeStreamHolder interface {
	holdNodeStream(node string)
	releaseNodeStream(node string)
}

// EndSession ends this client's node's session, if instanceID (the daemon's,
// as sent with Session) holds it live: a daemon shutting down cleanly calls
// it last, so that its next start need not wait for the session to lapse
// (docs/design.md §8.5). Otherwise it changes nothing, and the answer says
// why. Transient errors are retried while ctx lasts: ending twice is
// harmless (the second finds no live session).
func (c *Client) EndSession(ctx context.Context, instanceID string) (api.EndSessionResponse, error) {
	req := api.EndSessionRequest{NodeID: c.opts.nodeID, InstanceID: instanceID}
	var resp api.EndSessionResponse
	err := c.retry(ctx, call{op: "end session", id: c.opts.nodeID}, func(ctx context.Context) error {
		var err error
		resp, err = c.transport.EndSession(ctx, req)
		return err
	})
	if h, ok := c.transport.(nodeStreamHolder); ok && err == nil {
		h.releaseNodeStream(c.opts.nodeID)
	}
	return resp, err
}

// SyncRefs sends one step of a sync (api.SyncRequest.Step), which sends this node's whole
// journal (api.SyncRequest; docs/design.md §8.3).
// Transient errors are retried: a chunk is idempotent.
func (c *Client) SyncRefs(ctx context.Context, req api.SyncRequest) (api.SyncResponse, error) {
	var resp api.SyncResponse
	err := c.retry(ctx, call{op: "sync", id: c.opts.nodeID}, func(ctx context.Context) error {
		var err error
		resp, err = c.transport.SyncRefs(ctx, c.opts.nodeID, req)
		return err
	})
	return resp, err
}

// RefsList returns one page of the reference sets. Transient errors are
// retried.
func (c *Client) RefsList(ctx context.Context, after string, limit int) (api.RefsListResponse, error) {
	var resp api.RefsListResponse
	err := c.retry(ctx, call{op: "list references", id: after}, func(ctx context.Context) error {
		var err error
		resp, err = c.transport.RefsList(ctx, after, limit)
		return err
	})
	return resp, err
}

// nodesPage is how many members Nodes asks for at once (a variable for
// tests).
var nodesPage = 1000

// Nodes lists the cluster's members, a page at a time (a coordinator
// older than paging answers them all at once). Transient errors are
// retried.
func (c *Client) Nodes(ctx context.Context) (api.NodesResponse, error) {
	var all api.NodesResponse
	after := ""
	for {
		var resp api.NodesResponse
		err := c.retry(ctx, call{op: "nodes", id: after}, func(ctx context.Context) error {
			var err error
			resp, err = c.transport.NodesPage(ctx, after, nodesPage)
			return err
		})
		if err != nil {
			return api.NodesResponse{}, err
		}
		nodes := append(all.Nodes, resp.Nodes...)
		all, all.Nodes, all.Next = resp, nodes, ""
		if resp.Next == "" || resp.Next <= after {
			return all, nil
		}
		after = resp.Next
	}
}

// Downloads lists the cluster's in-flight downloads (the pull locks held
// now), each with its holder and the head of its queue, oldest first
// (admin; docs/design.md §5.10). Transient errors are retried.
func (c *Client) Downloads(ctx context.Context) (api.HeldLocksResponse, error) {
	var resp api.HeldLocksResponse
	err := c.retry(ctx, call{op: "held"}, func(ctx context.Context) error {
		var err error
		resp, err = c.transport.Held(ctx, api.OperationPull)
		return err
	})
	return resp, err
}

// Forget drops a member and its references (admin; docs/design.md §8.4).
func (c *Client) Forget(ctx context.Context, nodeID string) error {
	return c.retry(ctx, call{op: "forget", id: nodeID}, func(ctx context.Context) error {
		return c.transport.Forget(ctx, nodeID)
	})
}

// Release lets the next host to open nodeID's session take the node ID
// over (admin; docs/design.md §8.5).
func (c *Client) Release(ctx context.Context, nodeID string) (api.ReleaseResponse, error) {
	var resp api.ReleaseResponse
	err := c.retry(ctx, call{op: "release", id: nodeID}, func(ctx context.Context) error {
		var err error
		resp, err = c.transport.Release(ctx, nodeID)
		return err
	})
	return resp, err
}

// Expire asks the coordinator to forget nodeID, shown gone (docs/design.md
// §8.4): this client's node holds lease, the reap lock's, and sees
// nodeID's marker in state marker ("" none), unchanged for
// markerUnchanged by its own clock (which only an admin's call, without a
// lease, is taken on). The coordinator measures the node's absence and
// the marker's reports itself; api.ErrNotExpired when either is short of
// its node expiry.
func (c *Client) Expire(ctx context.Context, nodeID string, lease *Lease, marker string, markerUnchanged time.Duration) (api.ExpireResponse, error) {
	req := api.ExpireRequest{NodeID: c.opts.nodeID, Marker: marker, MarkerUnchangedMs: markerUnchanged.Milliseconds()}
	if lease != nil {
		req.NodeID, req.LeaseID = lease.NodeID, lease.ID
	}
	var resp api.ExpireResponse
	err := c.retry(ctx, call{op: "expire", id: nodeID}, func(ctx context.Context) error {
		var err error
		resp, err = c.transport.Expire(ctx, nodeID, req)
		return err
	})
	return resp, err
}

// Adopt makes the coordinator take a shared root's cluster (admin;
// docs/design.md §8.10).
func (c *Client) Adopt(ctx context.Context, req api.AdoptRequest) (api.Cluster, error) {
	var resp api.Cluster
	err := c.retry(ctx, call{op: "adopt", id: req.ClusterID}, func(ctx context.Context) error {
		var err error
		resp, err = c.transport.Adopt(ctx, req)
		return err
	})
	return resp, err
}

// Renew renews lease now, once, and reports whether the coordinator still
// knows it. A deleter calls it right before it removes a file
// (docs/design.md §8.7).
func (c *Client) Renew(ctx context.Context, lease *Lease) error {
	_, err := c.transport.Keepalive(ctx, api.KeepaliveRequest{Type: lease.Type, ResourceID: lease.ResourceID, LeaseID: lease.ID, NodeID: lease.NodeID})
	return err
}

// retry runs fn until it succeeds, is refused, ctx ends, or MaxRetries
// retries have failed; then the error is api.ErrUnavailable as well as the last
// error. Refusals are returned as they are (they name the key); other
// errors are prefixed with what. The pauses are jittered, so that the nodes
// a coordinator restart cut off do not all come back in the same
// millisecond.
func (c *Client) retry(ctx context.Context, what call, fn func(context.Context) error) error {
	var timer *time.Timer
	for attempt := 1; ; attempt++ {
		err := fn(ctx)
		switch {
		case err == nil:
			return nil
		case ctx.Err() != nil:
			return fmt.Errorf("%s: %w", what, ctx.Err())
		case !retryable(err):
			return err
		case attempt > c.opts.maxRetries:
			return fmt.Errorf("%s: giving up after %d attempt(s): %w", what, attempt, unreachable(err))
		}
		wait := jitter(c.opts.retryInterval)
		if ra := retryAfterOf(err); ra > 0 {
			// A busy coordinator said when: spread the retries over
			// [ra, 2·ra) so that those it refused together do not come
			// back together.
			wait = ra + rand.N(ra)
		}
		logger(ctx).WithError(err).WithField("attempt", attempt).WithField("retry_in", wait).
			Warn(what.String() + " failed; retrying")
		c.pauses.Add(1)
		if timer == nil {
			timer = time.NewTimer(wait)
			defer timer.Stop()
		} else {
			timer.Reset(wait)
		}
		select {
		case <-ctx.Done():
			// Both wrapped: the caller can tell a deadline that ended a
			// pause between unanswered attempts (a refused connection)
			// from one that ended a request in flight.
			return fmt.Errorf("%s: %w (after: %w)", what, ctx.Err(), err)
		case <-timer.C:
		}
	}
}

// track registers a lease whose keepalive runs; false when the client is
// closed.
func (c *Client) track(l *Lease) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return false
	}
	c.leases[l] = struct{}{}
	return true
}

func (c *Client) untrack(l *Lease) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.leases, l)
}

func (c *Client) isClosed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closed
}

// jitter returns a pause drawn uniformly from [d/2, 3d/2): on average d, so
// MaxRetries pauses still ride out about as long an outage.
func jitter(d time.Duration) time.Duration {
	return d/2 + rand.N(d)
}
