package httpserver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/containerd/log"
	jsonv2 "github.com/go-json-experiment/json"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttpadaptor"

	"github.com/sharedcontent/sharedcontent/internal/version"
	"github.com/sharedcontent/sharedcontent/lockserver"
	"github.com/sharedcontent/sharedcontent/lockserver/api"
)

// Handler serves a Coordinator's HTTP API (docs/design.md §3):
//
//	POST /lock            acquire, skip, queue or refuse
//	POST /unlock          release by the lease holder
//	POST /lock/keepalive  renew a lease
//	POST /lock/cancel     leave a queue or give back a grant
//	GET  /lock/subscribe  Server-Sent Events for a key or a request
//	GET  /lock/status     a key's holder, completion and queue
//	GET  /locks/held      the locks of a type held now and their queues (admin)
//	POST /refs/add        add a reference
//	GET  /refs            a resource's references
//	GET  /refs/list       every reference set, a page at a time
//	POST /nodes/session   open or renew a node's session (docs/design.md §8.3)
//	POST /nodes/session/end  a node ends its own session (clean shutdown)
//	PUT  /nodes/{id}/refs a node's full sync, chunked
//	DELETE /nodes/{id}    forget a member (admin)
//	POST /nodes/{id}/expire  forget a member shown gone (the reaper, or admin)
//	POST /nodes/{id}/release let another host take over a node ID (admin)
//	GET  /nodes           members and their state
//	GET  /cluster         the coordinator's identity
//	POST /cluster/adopt   take the shared root's cluster (admin)
//	GET /pins, PUT|GET|DELETE /pins/{name}  pins (admin, pins.go)
//	GET  /healthz, /readyz, /metrics
//
// Every answer carries api.ClusterHeader. A request that carries it with
// another cluster ID is refused (409 wrong_cluster) before it acts.
//
// Every error is a JSON api.ErrorResponse with a 4xx or 5xx status.
//
// Serve it with its own server, HTTPServer: an event stream hands its
// connection back to that server when it is over.
//
// The API is served by fasthttp rather than net/http: a lock cycle is two
// small requests, and net/http's per-request machinery (on both ends)
// cost more than the locking itself (docs/design.md §3.11, "HTTP stack").
type Handler struct {
	// coordinator is the Coordinator served; a replica's election swaps it at
	// every term it wins (SetCoordinator). Nil on a standby that never
	// led.
	coordinator atomic.Pointer[lockserver.Coordinator]
	http        *fasthttp.Server
	token       []byte // bearer token; empty disables auth
	// admin is the bearer token of admin calls; empty: token (if any).
	admin []byte
	// nodeTokens maps the SHA-256 of each node token to its node
	// (auth.go); certIdentity names nodes by client certificate.
	nodeTokens   map[[32]byte]string
	certIdentity bool
	routes       map[string]route
	// ready are the readiness checks of /readyz besides the Coordinator's.
	ready    []func(context.Context) error
	draining atomic.Bool
	// streamsDone is closed by Drain to end every event stream.
	streamsDone chan struct{}
	streams     *streamLimiter
	// lanes serves unlocks and sessions ahead of new work (lanes.go).
	lanes *lanes
	// leadership, when set, says whether this replica leads
	// (leadership.go); nil: it always does.
	leadership Leadership
}

// route is one endpoint: its method and handler. GET endpoints also answer
// HEAD (fasthttp then sends no body), except the event stream.
type route struct {
	method string
	head   bool // HEAD is allowed too
	admin  bool // needs the admin identity
	handle fasthttp.RequestHandler
	// others: the path's other methods, routed to routes of their own
	// (pinsRoute), for the Allow header.
	others []string
}

func onPost(h fasthttp.RequestHandler) route { return route{method: http.MethodPost, handle: h} }
func onGet(h fasthttp.RequestHandler) route {
	return route{method: http.MethodGet, head: true, handle: h}
}
func onStream(h fasthttp.RequestHandler) route { return route{method: http.MethodGet, handle: h} }

// allows reports whether the request's method is this route's.
func (r route) allows(ctx *fasthttp.RequestCtx) bool {
	m := ctx.Method()
	return string(m) == r.method || (r.head && string(m) == http.MethodHead)
}

// allowed is the Allow header of a 405 answer.
func (r route) allowed() string {
	methods := []string{r.method}
	if r.head {
		methods = append(methods, http.MethodHead)
	}
	return strings.Join(append(methods, r.others...), ", ")
}

// HandlerOption configures a Handler.
type HandlerOption func(*Handler)

// WithBearerToken requires "Authorization: Bearer <token>" on every endpoint
// except /healthz and /readyz. Its holder may act as any node, so with node
// identities (WithNodeTokens, WithCertIdentity) it is not accepted.
func WithBearerToken(token string) HandlerOption {
	return func(h *Handler) { h.token = []byte(token) }
}

// WithAdminToken requires "Authorization: Bearer <token>" on admin calls
// (forget, adopt) instead of the WithBearerToken token.
func WithAdminToken(token string) HandlerOption {
	return func(h *Handler) { h.admin = []byte(token) }
}

// WithStreamLimits bounds the event streams open at once, in all, per
// client IP address and per node; more are refused with 429.
func WithStreamLimits(total, perIP, perNode int) HandlerOption {
	return func(h *Handler) { h.streams = newStreamLimiter(total, perIP, perNode) }
}

// WithReadinessCheck adds a check to /readyz: while it fails, /readyz
// answers 503 with its error.
func WithReadinessCheck(check func(context.Context) error) HandlerOption {
	return func(h *Handler) { h.ready = append(h.ready, check) }
}

// WithMetricsGatherer serves the gatherer's metrics on /metrics (the
// Registerer given to NewCoordinator, typically).
func WithMetricsGatherer(g prometheus.Gatherer) HandlerOption {
	return func(h *Handler) {
		h.routes["/metrics"] = onGet(fasthttpadaptor.NewFastHTTPHandler(promhttp.HandlerFor(g, promhttp.HandlerOpts{})))
	}
}

// NewHandler returns the HTTP API of c. Serve it with HTTPServer, or
// through a Server.
func NewHandler(c *lockserver.Coordinator, opts ...HandlerOption) *Handler {
	h := &Handler{streamsDone: make(chan struct{}), streams: newStreamLimiter(DefaultMaxStreams, DefaultMaxStreamsPerIP, DefaultMaxStreamsPerNode),
		lanes: newLanes(DefaultBulkSlots())}
	if c != nil {
		h.coordinator.Store(c)
	}
	h.http = &fasthttp.Server{
		Handler:      h.Handle,
		ErrorHandler: HandleError,
		Name:         "sharedcontent-lockserver",
		// ReadTimeout bounds reading one request; event streams lift it
		// while they last.
		ReadTimeout: 10 * time.Second,
		IdleTimeout: 2 * time.Minute,
		// Bodies up to the limit are read before the handler runs;
		// longer ones (and chunked ones) are streamed, and the handler
		// refuses them after api.MaxBodyBytes.
		MaxRequestBodySize: api.MaxBodyBytes,
		StreamRequestBody:  true,
		// Event streams take their connection over and give it back
		// (ServeConn) when they are over.
		KeepHijackedConns: true,
		// Shutdown tells keep-alive clients to go, instead of waiting
		// for them.
		CloseOnShutdown:              true,
		DisablePreParseMultipartForm: true,
		Logger:                       fasthttpLogger{},
		// A Server's guardedListener tracks connection states, to close
		// at shutdown those that never sent a request.
		ConnState: setConnState,
	}
	h.routes = map[string]route{
		"/lock":              onPost(h.lock),
		"/unlock":            onPost(h.unlock),
		"/lock/keepalive":    onPost(h.keepalive),
		"/lock/cancel":       onPost(h.cancel),
		"/lock/subscribe":    onStream(h.subscribe),
		"/lock/events":       onStream(h.nodeEvents),
		"/lock/status":       onGet(h.status),
		"/locks/held":        {method: http.MethodGet, admin: true, handle: h.held},
		"/refs/add":          onPost(h.refsAdd),
		"/refs":              onGet(h.refs),
		"/refs/list":         onGet(h.refsList),
		"/nodes/session":     onPost(h.session),
		"/nodes/session/end": onPost(h.endSession),
		"/nodes":             onGet(h.nodes),
		"/cluster":           onGet(h.cluster),
		"/cluster/adopt":     {method: http.MethodPost, admin: true, handle: h.adopt},
		"/healthz":           onGet(healthz),
		"/readyz":            onGet(h.readyz),
	}
	for _, o := range opts {
		o(h)
	}
	h.streams.members = func(node string) (int, int, bool) {
		if l := h.coord(); l != nil {
			return l.StreamMembers(node)
		}
		return 0, 0, false
	}
	return h
}

// healthz answers "ok", with the running build in version.Header.
func healthz(ctx *fasthttp.RequestCtx) {
	ctx.Response.Header.Set(version.Header, buildVersion)
	ctx.SetBodyString("ok\n")
}

// buildVersion is version.Get().String(), read once.
var buildVersion = version.Get().String()

// coord returns the Coordinator served now (nil on a standby that never
// led: the leadership check refuses every API call there first).
func (h *Handler) coord() *lockserver.Coordinator { return h.coordinator.Load() }

// SetCoordinator makes the Handler serve c from the next request on: a
// replica that wins an election serves the Coordinator of its term
// (docs/design.md §7). Set it before the Leadership says leader. A
// request in flight may still finish on the one before; the Handler then
// answers it not_leader if the replica no longer leads (Handle).
func (h *Handler) SetCoordinator(c *lockserver.Coordinator) { h.coordinator.Store(c) }

// StreamMetrics is a prometheus.Collector of the Handler's event streams:
// open by kind, and the limits in effect (streams.go).
func (h *Handler) StreamMetrics() prometheus.Collector { return h.streams }

// HTTPServer returns the server of the API. Its Handler is Handle; a
// caller may wrap it (to count or inject faults) before serving. Drain
// the Handler before shutting the server down, to end the event streams.
func (h *Handler) HTTPServer() *fasthttp.Server { return h.http }

// Drain makes /readyz and new requests answer 503 and ends every event
// stream, so that a server shutdown can finish.
func (h *Handler) Drain() {
	if h.draining.CompareAndSwap(false, true) {
		close(h.streamsDone)
	}
}

// Handle serves one request; it is the fasthttp.RequestHandler of the API.
func (h *Handler) Handle(ctx *fasthttp.RequestCtx) {
	path := ctx.Path()
	var c api.Cluster
	if l := h.coord(); l != nil {
		c = l.Cluster()
		ctx.Response.Header.Set(api.ClusterHeader, clusterHeader(c))
	}
	ctx.Response.Header.Set(api.ProtocolHeader, api.ProtocolVersion)
	var r route
	ok := canonicalPath(ctx.URI().PathOriginal(), path)
	if !ok {
		path = ctx.URI().PathOriginal() // routes nowhere: 404
	} else if r, ok = h.routes[string(path)]; !ok {
		r, ok = h.nodeRoute(ctx)
		if !ok {
			r, ok = h.pinsRoute(ctx)
		}
	}
	probe := string(path) == "/healthz" || string(path) == "/readyz"
	who, known := h.authenticate(ctx)
	if known {
		markProven(ctx.Conn()) // evict.go
	}
	if !probe && !known {
		ctx.Response.Header.Set("WWW-Authenticate", `Bearer realm="sharedcontent"`)
		writeError(ctx, fmt.Errorf("missing or wrong credentials (bearer token or client certificate): %w", api.ErrUnauthorized))
		return
	}
	if r.admin && !who.admin {
		err := fmt.Errorf("%s needs the admin identity (--admin-token-file, or a client certificate with URI %s): %w", path, adminURI, api.ErrForbidden)
		if who.anonymous {
			ctx.Response.Header.Set("WWW-Authenticate", `Bearer realm="sharedcontent"`)
			err = fmt.Errorf("%s needs the admin token: %w", path, api.ErrUnauthorized)
		}
		writeError(ctx, err)
		return
	}
	if who.node != "" {
		// Only a node identity restricts what a call may do (actAs); the
		// zero caller callerOf returns otherwise acts as anyone, and
		// boxing one per request would allocate on every call.
		ctx.SetUserValue(callerKey, who)
	}
	if h.draining.Load() && string(path) != "/healthz" && string(path) != "/metrics" {
		writeError(ctx, fmt.Errorf("server is shutting down: %w", api.ErrUnavailable))
		return
	}
	if !ok {
		writeError(ctx, fmt.Errorf("no endpoint %q: %w", path, api.ErrNotFound))
		return
	}
	// A standby refuses before the protocol and cluster checks: its
	// cluster state is not the leader's, and a node must learn where the
	// leader is rather than be refused for good (docs/design.md §7).
	if !probe && string(path) != "/metrics" && !h.leads(ctx) {
		return
	}
	if v := ctx.Request.Header.Peek(api.ProtocolHeader); len(v) > 0 && string(v) != api.ProtocolVersion {
		writeError(ctx, fmt.Errorf("the client speaks sharedcontent protocol %q, this coordinator speaks %q; upgrade the older of the two: %w",
			v, api.ProtocolVersion, api.ErrUnsupportedProtocol))
		return
	}
	if want := ctx.Request.Header.Peek(api.ClusterHeader); len(want) > 0 && string(want) != c.ClusterID {
		writeError(ctx, lockserver.WrongCluster(string(want), c))
		return
	}
	if !r.allows(ctx) {
		ctx.Response.Header.Set("Allow", r.allowed())
		writeError(ctx, fmt.Errorf("%s %s: %w", ctx.Method(), path, api.ErrMethodNotAllowed))
		return
	}
	h.lanes.serve(ctx, path, r.handle)
	if !probe && string(path) != "/metrics" {
		h.stillLeads(ctx)
	}
}

// clusterHeader is the value of api.ClusterHeader: the coordinator's
// cluster ID and epoch.
func clusterHeader(c api.Cluster) string { return c.ClusterID + "/" + strconv.FormatUint(c.Epoch, 10) }

// HandleError answers a request fasthttp could not read (the server's
// ErrorHandler) with a 400 invalid_argument error. A read that timed out
// gets no answer: the connection is closed, as net/http does, since a
// client that sent nothing would take an answer to a request it has not
// made yet for the answer to its next one.
func HandleError(ctx *fasthttp.RequestCtx, err error) {
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		_ = ctx.Conn().Close()
		return
	}
	writeError(ctx, fmt.Errorf("malformed HTTP request: %w: %w", api.ErrInvalidArgument, err))
}

// nodeRoute routes /nodes/{id} (DELETE: forget, admin),
// /nodes/{id}/refs (PUT: sync), /nodes/{id}/expire (POST) and
// /nodes/{id}/release (POST, admin).
func (h *Handler) nodeRoute(ctx *fasthttp.RequestCtx) (route, bool) {
	rest, ok := strings.CutPrefix(string(ctx.Path()), "/nodes/")
	if !ok || rest == "" {
		return route{}, false
	}
	if id, ok := strings.CutSuffix(rest, "/refs"); ok && !strings.Contains(id, "/") {
		return route{method: http.MethodPut, handle: func(ctx *fasthttp.RequestCtx) { h.syncRefs(ctx, id) }}, true
	}
	if id, ok := strings.CutSuffix(rest, "/expire"); ok && !strings.Contains(id, "/") {
		return onPost(func(ctx *fasthttp.RequestCtx) { h.expire(ctx, id) }), true
	}
	if id, ok := strings.CutSuffix(rest, "/release"); ok && !strings.Contains(id, "/") {
		return route{method: http.MethodPost, admin: true, handle: func(ctx *fasthttp.RequestCtx) {
			resp, err := h.coord().Release(ctx, id)
			reply(ctx, resp, err)
		}}, true
	}
	if strings.Contains(rest, "/") {
		return route{}, false
	}
	return route{method: http.MethodDelete, admin: true, handle: func(ctx *fasthttp.RequestCtx) {
		reply(ctx, struct{}{}, h.coord().Forget(ctx, rest))
	}}, true
}

func (h *Handler) readyz(ctx *fasthttp.RequestCtx) {
	if h.draining.Load() {
		writeError(ctx, fmt.Errorf("server is shutting down: %w", api.ErrUnavailable))
		return
	}
	if !h.leads(ctx) {
		return // a standby is alive (/healthz) but not ready
	}
	for _, check := range append([]func(context.Context) error{h.coord().Ready}, h.ready...) {
		if err := check(ctx); err != nil {
			writeError(ctx, err)
			return
		}
	}
	ctx.SetBodyString("ok\n")
}

func (h *Handler) lock(ctx *fasthttp.RequestCtx) {
	var req api.LockRequest
	if !decode(ctx, &req) || !actAs(ctx, &req.NodeID) {
		return
	}
	var c context.Context = ctx
	if req.ResourceID == api.ReapLockResource && h.adminIdentity(ctx) {
		c = lockserver.AsAdmin(ctx)
	}
	resp, err := h.coord().Lock(c, req)
	reply(ctx, resp, err)
}

func (h *Handler) unlock(ctx *fasthttp.RequestCtx) {
	var req api.UnlockRequest
	if !decode(ctx, &req) || !actAs(ctx, &req.NodeID) {
		return
	}
	resp, err := h.coord().Unlock(ctx, req)
	reply(ctx, resp, err)
}

func (h *Handler) keepalive(ctx *fasthttp.RequestCtx) {
	var req api.KeepaliveRequest
	if !decode(ctx, &req) || !actAs(ctx, &req.NodeID) {
		return
	}
	resp, err := h.coord().Keepalive(ctx, req)
	reply(ctx, resp, err)
}

func (h *Handler) cancel(ctx *fasthttp.RequestCtx) {
	var req api.CancelRequest
	if !decode(ctx, &req) || !actAs(ctx, &req.NodeID) {
		return
	}
	err := h.coord().Cancel(ctx, req)
	reply(ctx, struct{}{}, err)
}

func (h *Handler) status(ctx *fasthttp.RequestCtx) {
	q := ctx.QueryArgs()
	node := string(q.Peek("node_id"))
	if !actAs(ctx, &node) {
		return
	}
	resp, err := h.coord().Status(ctx, api.OperationType(q.Peek("type")), string(q.Peek("resource_id")), node, string(q.Peek("request_id")))
	reply(ctx, resp, err)
}

func (h *Handler) refsAdd(ctx *fasthttp.RequestCtx) {
	var req api.RefsAddRequest
	if !decode(ctx, &req) || !actAs(ctx, &req.NodeID) {
		return
	}
	add := h.coord().AddRef
	if req.Found {
		add = h.coord().AddFoundRef
	}
	resp, err := add(commitWaits(ctx), req.ResourceID, req.NodeID)
	if err == nil && !req.CountOnly {
		// A node that predates count_only gets the nodes, read after
		// the add (docs/design.md §10.2).
		var refs api.RefsResponse
		if refs, err = h.coord().Refs(ctx, req.ResourceID); err == nil {
			resp = refs
		}
	}
	reply(ctx, resp, err)
}

func (h *Handler) refs(ctx *fasthttp.RequestCtx) {
	resp, err := h.coord().Refs(ctx, string(ctx.QueryArgs().Peek("resource_id")))
	reply(ctx, resp, err)
}

func (h *Handler) refsList(ctx *fasthttp.RequestCtx) {
	q := ctx.QueryArgs()
	limit, _ := strconv.Atoi(string(q.Peek("limit")))
	resp, err := h.coord().RefsList(ctx, string(q.Peek("after")), limit)
	if err == nil && string(q.Peek(api.RefsListFormParam)) == api.RefsListFormLines {
		// Asked for the lines form (docs/design.md §10.3); any other
		// request gets JSON, as before.
		ctx.Response.Header.SetContentType(api.RefsLinesMediaType)
		ctx.Response.SetBodyRaw(api.AppendRefsLines(nil, resp))
		ctx.SetStatusCode(fasthttp.StatusOK)
		return
	}
	reply(ctx, resp, err)
}

func (h *Handler) session(ctx *fasthttp.RequestCtx) {
	var req api.SessionRequest
	if !decode(ctx, &req) || !actAs(ctx, &req.NodeID) {
		return
	}
	who, _ := h.authenticate(ctx)
	req.Identified = who.node != "" && who.node == req.NodeID
	resp, err := h.coord().Session(ctx, req)
	reply(ctx, resp, err)
}

func (h *Handler) endSession(ctx *fasthttp.RequestCtx) {
	var req api.EndSessionRequest
	if !decode(ctx, &req) || !actAs(ctx, &req.NodeID) {
		return
	}
	resp, err := h.coord().EndSession(ctx, req)
	reply(ctx, resp, err)
}

func (h *Handler) syncRefs(ctx *fasthttp.RequestCtx, nodeID string) {
	var req api.SyncRequest
	if !actAs(ctx, &nodeID) || !decode(ctx, &req) {
		return
	}
	resp, err := h.coord().SyncRefs(ctx, nodeID, req)
	reply(ctx, resp, err)
}

// expire: the reaper (its reap lock's lease) or an admin (no lease).
func (h *Handler) expire(ctx *fasthttp.RequestCtx, nodeID string) {
	var req api.ExpireRequest
	if !decode(ctx, &req) || !actAs(ctx, &req.NodeID) {
		return
	}
	if who, _ := h.authenticate(ctx); req.LeaseID == "" && !who.admin {
		writeError(ctx, fmt.Errorf("expiring a member needs the reap lock's lease (lease_id) or the admin identity: %w", api.ErrForbidden))
		return
	}
	resp, err := h.coord().Expire(ctx, nodeID, req)
	reply(ctx, resp, err)
}

func (h *Handler) nodes(ctx *fasthttp.RequestCtx) {
	q := ctx.QueryArgs()
	limit := 0
	if v := q.Peek("limit"); len(v) > 0 {
		var err error
		if limit, err = strconv.Atoi(string(v)); err != nil || limit < 0 {
			writeError(ctx, fmt.Errorf("limit %q: not a count: %w", v, api.ErrInvalidArgument))
			return
		}
	}
	resp, err := h.coord().NodesPage(ctx, string(q.Peek("after")), limit)
	reply(ctx, resp, err)
}

// held answers GET /locks/held?type=T (pull by default).
func (h *Handler) held(ctx *fasthttp.RequestCtx) {
	resp, err := h.coord().Held(ctx, api.OperationType(ctx.QueryArgs().Peek("type")))
	reply(ctx, resp, err)
}

func (h *Handler) cluster(ctx *fasthttp.RequestCtx) { reply(ctx, h.coord().Cluster(), nil) }

func (h *Handler) adopt(ctx *fasthttp.RequestCtx) {
	var req api.AdoptRequest
	if !decode(ctx, &req) {
		return
	}
	resp, err := h.coord().Adopt(ctx, req)
	reply(ctx, resp, err)
}

// decode reads the request body, at most api.MaxBodyBytes, and decodes it
// strictly into v. On failure it has written the error.
func decode(ctx *fasthttp.RequestCtx, v any) bool {
	b := bodyBuffers.Get().(*bodyBuffer)
	defer b.put()
	var err error
	// HTTPServer streams request bodies; a request without one has none.
	if body := ctx.RequestBodyStream(); body != nil {
		b.limit = io.LimitedReader{R: body, N: api.MaxBodyBytes + 1}
		_, err = b.buf.ReadFrom(&b.limit)
		if err == nil && b.buf.Len() > api.MaxBodyBytes {
			// Read what the client is still sending (within the
			// server's read timeout), so that closing the connection
			// after the answer does not reset it before the client has
			// read the 413.
			_, _ = io.CopyN(io.Discard, body, maxDrainBytes)
			ctx.SetConnectionClose()
			err = fmt.Errorf("request body exceeds %d bytes: %w", api.MaxBodyBytes, api.ErrTooLarge)
		} else if err != nil {
			err = fmt.Errorf("reading the request body: %w: %w", api.ErrInvalidArgument, err)
		}
	}
	if err == nil {
		err = DecodeRequest(b.buf.Bytes(), v)
	}
	if err != nil {
		writeError(ctx, err)
		return false
	}
	return true
}

// bodyBuffer holds a request body while it is decoded, and the reader
// that bounds it (pooled together: a reader passed as an io.Reader would
// otherwise be allocated per request).
type bodyBuffer struct {
	buf   bytes.Buffer
	limit io.LimitedReader
}

// bodyBuffers holds bodyBuffers between requests.
var bodyBuffers = sync.Pool{New: func() any { return new(bodyBuffer) }}

func (b *bodyBuffer) put() {
	b.limit = io.LimitedReader{}
	if b.buf.Cap() > 64<<10 {
		return // an unusual body: let it go
	}
	b.buf.Reset()
	bodyBuffers.Put(b)
}

// maxDrainBytes bounds what the server reads of an oversized body before
// it answers 413 and closes the connection.
const maxDrainBytes = 64 << 20

// DecodeRequest decodes one JSON request body into v: exactly one object,
// no duplicate members, members of the right types, valid UTF-8, nothing
// after it. Unknown members are ignored (docs/design.md §9): nodes of different
// versions talk to one coordinator during a rolling upgrade, and a field a
// newer client adds must not break an older coordinator.
// Errors match api.ErrInvalidArgument; a body over api.MaxBodyBytes matches
// api.ErrTooLarge.
//
// Requests are decoded with go-json-experiment/json (encoding/json/v2 to
// be): it is strict in one pass and, on the coordinator's hot path, about
// three times faster than encoding/json with a Decoder. Responses are
// still encoded with encoding/json, which is faster at that here.
func DecodeRequest(body []byte, v any) error {
	if len(body) > api.MaxBodyBytes {
		return fmt.Errorf("request body exceeds %d bytes: %w", api.MaxBodyBytes, api.ErrTooLarge)
	}
	if err := jsonv2.Unmarshal(body, v); err != nil {
		return fmt.Errorf("malformed JSON request: %w: %w", api.ErrInvalidArgument, err)
	}
	return nil
}

func reply(ctx *fasthttp.RequestCtx, v any, err error) {
	if err != nil {
		writeError(ctx, err)
		return
	}
	writeJSON(ctx, fasthttp.StatusOK, v)
}

var jsonContentType = []byte("application/json")

// writeJSON answers v, encoded straight into the response body (an
// Encoder writes nothing when encoding fails, and ends with a newline).
func writeJSON(ctx *fasthttp.RequestCtx, status int, v any) {
	ctx.Response.Header.SetContentTypeBytes(jsonContentType)
	if err := json.NewEncoder(ctx.Response.BodyWriter()).Encode(v); err != nil {
		status = fasthttp.StatusInternalServerError
		ctx.SetBodyString(`{"error":"encoding response","code":"internal"}` + "\n")
	}
	ctx.SetStatusCode(status)
}

func writeError(ctx *fasthttp.RequestCtx, err error) {
	status, _ := api.HTTPStatus(err)
	body := api.ErrorBody(err)
	var cannotLead *cannotLeadError
	if status >= 500 && !errors.Is(err, api.ErrNotLeader) && !errors.As(err, &cannotLead) { // a standby refusing is routine
		log.L.WithError(err).WithField("path", string(ctx.Path())).Error("request failed")
	}
	var busy *lockserver.BusyError
	if errors.As(err, &busy) {
		// Whole seconds, rounded up: the node waits at least that long.
		ctx.Response.Header.Set("Retry-After", strconv.Itoa(int((busy.RetryAfter+time.Second-1)/time.Second)))
	}
	writeJSON(ctx, status, body)
}

// fasthttpLogger sends fasthttp's own messages (connection errors) to the
// containerd log at debug level.
type fasthttpLogger struct{}

func (fasthttpLogger) Printf(format string, args ...any) {
	log.L.Debugf("http: "+format, args...)
}
