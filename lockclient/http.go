package lockclient

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/valyala/fasthttp"

	"github.com/sharedcontent/sharedcontent/lockserver/api"
)

// maxResponseBytes bounds a response body the client reads. Real answers
// are a few hundred bytes; a status with a long queue a few hundred KiB.
const maxResponseBytes = 16 << 20

// jsonMediaType is the value of the Content-Type and Accept headers.
const jsonMediaType = "application/json"

// ShortClient sends the short requests of the API (lock, unlock,
// keepalive, cancel, status, refs) and must give up at deadline.
// *fasthttp.HostClient and *fasthttp.Client implement it.
//
// The short requests go over fasthttp rather than net/http: a lock cycle is
// two small requests, and net/http's transport (a read and a write goroutine
// per connection, a hand-off per request) cost more than the coordinator's
// work (docs/design.md §3.11, "HTTP stack"). Event streams, which are long
// and few, stay on net/http.
type ShortClient interface {
	DoDeadline(req *fasthttp.Request, resp *fasthttp.Response, deadline time.Time) error
}

// httpTransport is the Transport of a remote coordinator (the HTTP API
// of docs/design.md §3).
// Its fields are set by newHTTPTransport and never change.
type httpTransport struct {
	// replicas are the coordinator's URLs (one, or its replicas); cur is
	// the index of the one believed to lead (replicas.go).
	replicas []*replica
	cur      atomic.Int32
	long     *http.Client // event streams, without a timeout
	auth     string       // Authorization header value; empty sends none
	// hintsFollowed counts not_leader hints followed at once; movedOn,
	// moves to the next URL after a failure (tests read them).
	hintsFollowed, movedOn atomic.Int64
	// cluster is the cluster ID sent in api.ClusterHeader with every
	// request (nil: none), so that a coordinator of another cluster
	// refuses instead of acting (docs/design.md §8.10).
	cluster atomic.Pointer[string]

	pollInterval   time.Duration
	requestTimeout time.Duration // bounds short requests and a stream's first event

	// onQueued, when set (by tests and benchmarks), is called when an
	// event stream has confirmed that the request waits in the queue.
	onQueued func(api.LockRequest)
	// perRequestStreams: wait on a stream per request (/lock/subscribe),
	// as clients before the node stream did (WithPerRequestStreams, tests).
	perRequestStreams bool

	nodeStreamsMu sync.Mutex
	nodeStreams   map[string]*nodeStream // by node; protected by nodeStreamsMu
	// nodeStreamsClosed: the Client closed; protected by nodeStreamsMu.
	nodeStreamsClosed bool
}

func newHTTPTransport(serverURLs string, o *options) (*httpTransport, error) {
	list, err := ParseURLs(serverURLs)
	if err != nil {
		return nil, err
	}
	tr := &httpTransport{
		long:              o.long,
		pollInterval:      o.pollInterval,
		requestTimeout:    o.requestTimeout,
		perRequestStreams: o.perRequestStreams,
	}
	if o.token != "" {
		tr.auth = "Bearer " + o.token
	}
	for _, base := range list {
		u, _ := url.Parse(base) // checked by ParseURLs
		r := &replica{base: base, norm: normalBase(u), short: o.short, urls: make(map[string]string)}
		for _, p := range []string{"/lock", "/unlock", "/lock/keepalive", "/lock/cancel", "/lock/status", "/refs/add", "/refs"} {
			r.urls[p] = base + p
		}
		if r.short == nil {
			r.short = newHostClient(u, o.tlsConfig)
		}
		tr.replicas = append(tr.replicas, r)
	}
	if tr.long == nil {
		tr.long = &http.Client{Transport: newStreamRoundTripper(o.tlsConfig)}
	}
	return tr, nil
}

// newHostClient returns the fasthttp client of short requests to the one
// coordinator at u.
func newHostClient(u *url.URL, tc *tls.Config) *fasthttp.HostClient {
	addr := u.Host
	if u.Port() == "" {
		port := "80"
		if u.Scheme == "https" {
			port = "443"
		}
		addr = net.JoinHostPort(u.Hostname(), port)
	}
	dialer := &net.Dialer{Timeout: dialTimeout, KeepAlive: 30 * time.Second}
	return &fasthttp.HostClient{
		Addr:      addr,
		Name:      "sharedcontent-lockclient",
		IsTLS:     u.Scheme == "https",
		TLSConfig: tc,
		Dial:      func(addr string) (net.Conn, error) { return dialer.Dial("tcp", addr) },
		MaxConns:  maxConnsPerHost,
		// Calls beyond MaxConns wait for a connection instead of failing.
		MaxConnWaitTimeout:  dialTimeout,
		MaxIdleConnDuration: 90 * time.Second,
		MaxResponseBodySize: maxResponseBytes,
		// Every request of the API is idempotent (a Lock carries its
		// request ID), so one sent on a keep-alive connection the coordinator
		// had just closed is sent again at once, on a new one.
		MaxIdemponentCallAttempts: 2,
		RetryIfErr: func(_ *fasthttp.Request, _ int, err error) (resetTimeout, retry bool) {
			return false, errors.Is(err, io.EOF) || errors.Is(err, fasthttp.ErrConnectionClosed) ||
				errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
		},
		DisablePathNormalizing: true,
	}
}

// newStreamRoundTripper returns the net/http transport of event streams.
// It ignores HTTP_PROXY and friends: nodes set them to reach registries,
// and the coordinator is a cluster-internal service whose event streams
// proxies tend to buffer. (Use WithLongClient to go through a proxy.)
func newStreamRoundTripper(tc *tls.Config) *http.Transport {
	return &http.Transport{
		DialContext:         (&net.Dialer{Timeout: dialTimeout, KeepAlive: 30 * time.Second}).DialContext,
		TLSClientConfig:     tc,
		TLSHandshakeTimeout: dialTimeout,
		MaxIdleConns:        maxIdleConnsPerHost,
		MaxIdleConnsPerHost: maxIdleConnsPerHost,
		IdleConnTimeout:     90 * time.Second,
	}
}

// closeIdle closes the idle connections of both clients.
func (tr *httpTransport) closeIdle() {
	tr.closeNodeStreams()
	for _, r := range tr.replicas {
		if c, ok := r.short.(interface{ CloseIdleConnections() }); ok {
			c.CloseIdleConnections()
		}
	}
	tr.long.CloseIdleConnections()
}

func (tr *httpTransport) Lock(ctx context.Context, req api.LockRequest) (api.LockResponse, error) {
	var resp api.LockResponse
	err := tr.do(ctx, http.MethodPost, "/lock", nil, req, &resp)
	return resp, err
}

func (tr *httpTransport) Unlock(ctx context.Context, req api.UnlockRequest) (api.UnlockResponse, error) {
	var resp api.UnlockResponse
	err := tr.do(ctx, http.MethodPost, "/unlock", nil, req, &resp)
	return resp, err
}

func (tr *httpTransport) Keepalive(ctx context.Context, req api.KeepaliveRequest) (api.KeepaliveResponse, error) {
	var resp api.KeepaliveResponse
	err := tr.do(ctx, http.MethodPost, "/lock/keepalive", nil, req, &resp)
	return resp, err
}

func (tr *httpTransport) Cancel(ctx context.Context, req api.CancelRequest) error {
	return tr.do(ctx, http.MethodPost, "/lock/cancel", nil, req, nil)
}

func (tr *httpTransport) Status(ctx context.Context, typ api.OperationType, resourceID, nodeID, requestID string) (api.StatusResponse, error) {
	q := url.Values{"type": {string(typ)}, "resource_id": {resourceID}}
	if nodeID != "" {
		q.Set("node_id", nodeID)
	}
	if requestID != "" {
		q.Set("request_id", requestID)
	}
	var resp api.StatusResponse
	err := tr.do(ctx, http.MethodGet, "/lock/status", q, nil, &resp)
	return resp, err
}

func (tr *httpTransport) AddRef(ctx context.Context, resourceID, nodeID string) (api.RefsResponse, error) {
	return tr.addRef(ctx, api.RefsAddRequest{ResourceID: resourceID, NodeID: nodeID, CountOnly: true})
}

func (tr *httpTransport) AddFoundRef(ctx context.Context, resourceID, nodeID string) (api.RefsResponse, error) {
	return tr.addRef(ctx, api.RefsAddRequest{ResourceID: resourceID, NodeID: nodeID, Found: true, CountOnly: true})
}

func (tr *httpTransport) addRef(ctx context.Context, req api.RefsAddRequest) (api.RefsResponse, error) {
	var resp api.RefsResponse
	err := tr.do(ctx, http.MethodPost, "/refs/add", nil, req, &resp)
	return resp, err
}

func (tr *httpTransport) Refs(ctx context.Context, resourceID string) (api.RefsResponse, error) {
	var resp api.RefsResponse
	err := tr.do(ctx, http.MethodGet, "/refs", url.Values{"resource_id": {resourceID}}, nil, &resp)
	return resp, err
}

func (tr *httpTransport) RefsList(ctx context.Context, after string, limit int) (api.RefsListResponse, error) {
	var page refsPage
	q := url.Values{"after": {after}, "limit": {strconv.Itoa(limit)}, api.RefsListFormParam: {api.RefsListFormLines}}
	err := tr.do(ctx, http.MethodGet, "/refs/list", q, nil, &page)
	return page.RefsListResponse, err
}

func (tr *httpTransport) Session(ctx context.Context, req api.SessionRequest) (api.SessionResponse, error) {
	var resp api.SessionResponse
	err := tr.do(ctx, http.MethodPost, "/nodes/session", nil, req, &resp)
	return resp, err
}

func (tr *httpTransport) EndSession(ctx context.Context, req api.EndSessionRequest) (api.EndSessionResponse, error) {
	var resp api.EndSessionResponse
	err := tr.do(ctx, http.MethodPost, "/nodes/session/end", nil, req, &resp)
	return resp, err
}

func (tr *httpTransport) SyncRefs(ctx context.Context, nodeID string, req api.SyncRequest) (api.SyncResponse, error) {
	var resp api.SyncResponse
	err := tr.do(ctx, http.MethodPut, "/nodes/"+url.PathEscape(nodeID)+"/refs", nil, req, &resp)
	return resp, err
}

func (tr *httpTransport) NodesPage(ctx context.Context, after string, limit int) (api.NodesResponse, error) {
	var resp api.NodesResponse
	q := url.Values{"after": {after}, "limit": {strconv.Itoa(limit)}}
	err := tr.do(ctx, http.MethodGet, "/nodes", q, nil, &resp)
	return resp, err
}

func (tr *httpTransport) Held(ctx context.Context, typ api.OperationType) (api.HeldLocksResponse, error) {
	var resp api.HeldLocksResponse
	err := tr.do(ctx, http.MethodGet, "/locks/held", url.Values{"type": {string(typ)}}, nil, &resp)
	return resp, err
}

func (tr *httpTransport) Forget(ctx context.Context, nodeID string) error {
	return tr.do(ctx, http.MethodDelete, "/nodes/"+url.PathEscape(nodeID), nil, nil, nil)
}

func (tr *httpTransport) Release(ctx context.Context, nodeID string) (api.ReleaseResponse, error) {
	var resp api.ReleaseResponse
	err := tr.do(ctx, http.MethodPost, "/nodes/"+url.PathEscape(nodeID)+"/release", nil, struct{}{}, &resp)
	return resp, err
}

func (tr *httpTransport) Expire(ctx context.Context, nodeID string, req api.ExpireRequest) (api.ExpireResponse, error) {
	var resp api.ExpireResponse
	err := tr.do(ctx, http.MethodPost, "/nodes/"+url.PathEscape(nodeID)+"/expire", nil, req, &resp)
	return resp, err
}

func (tr *httpTransport) Adopt(ctx context.Context, req api.AdoptRequest) (api.Cluster, error) {
	var resp api.Cluster
	err := tr.do(ctx, http.MethodPost, "/cluster/adopt", nil, req, &resp)
	return resp, err
}

// do sends one short request with a JSON body (when in is not nil) and
// decodes a 200 answer into out. An error answer becomes a *statusError
// around the error api.FromResponse makes of it, so errors.Is matches the
// protocol's sentinels.
//
// Answers are decoded with go-json-experiment/json (encoding/json/v2 to
// be), about three times faster than encoding/json for them; unknown
// members are ignored, so a newer coordinator's additions do not break an
// older client. Requests are encoded with encoding/json, faster at that.
//
// The request is bounded by the request timeout and ctx's deadline; a
// cancellation of ctx is seen before it starts, not while it runs (it
// takes a round trip on loopback, and at most the request timeout).
//
// With several coordinator URLs it goes to the replica believed to lead,
// follows a not_leader hint at once (at most maxHintFollows times), and
// on another transient failure makes the next URL current for the retry
// (replicas.go).
func (tr *httpTransport) do(ctx context.Context, method, path string, q url.Values, in, out any) error {
	_, err := onLeader(ctx, tr, func(r *replica) (struct{}, error) {
		return struct{}{}, tr.doOn(ctx, r, method, path, q, in, out)
	})
	return err
}

// doOn sends one short request to replica r (do).
func (tr *httpTransport) doOn(ctx context.Context, r *replica, method, path string, q url.Values, in, out any) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	req := fasthttp.AcquireRequest()
	defer fasthttp.ReleaseRequest(req)
	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseResponse(resp)

	target, ok := r.urls[path]
	if !ok {
		target = r.base + path
	}
	if q != nil {
		target += "?" + q.Encode()
	}
	req.SetRequestURI(target)
	req.Header.SetMethod(method)
	if in != nil {
		// Encoded straight into the request's (pooled) body.
		if err := json.NewEncoder(req.BodyWriter()).Encode(in); err != nil {
			return fmt.Errorf("lockclient: encoding %s request: %w", path, err)
		}
		req.Header.SetContentType(jsonMediaType)
	}
	req.Header.Set("Accept", jsonMediaType)
	req.Header.Set(api.ProtocolHeader, api.ProtocolVersion)
	if tr.auth != "" {
		req.Header.Set("Authorization", tr.auth)
	}
	if c := tr.cluster.Load(); c != nil {
		req.Header.Set(api.ClusterHeader, *c)
	}
	deadline := time.Now().Add(tr.requestTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	if err := r.short.DoDeadline(req, resp, deadline); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("%s %s: %w", method, target, err)
	}
	if err := checkProtocol(string(resp.Header.Peek(api.ProtocolHeader))); err != nil {
		return err
	}
	data := resp.Body()
	if resp.StatusCode() != http.StatusOK {
		err := responseError(resp.StatusCode(), data)
		err.retryAfter = parseRetryAfter(string(resp.Header.Peek("Retry-After")))
		return err
	}
	if out == nil {
		return nil
	}
	if d, ok := out.(bodyDecoder); ok {
		if err := d.decodeBody(string(resp.Header.ContentType()), data); err != nil {
			return fmt.Errorf("%s %s: decoding the answer: %w", method, path, err)
		}
		return nil
	}
	if err := jsonv2.Unmarshal(data, out); err != nil {
		// Not the coordinator's answer (a misrouted proxy?): transient.
		return fmt.Errorf("%s %s: decoding the answer: %w", method, path, err)
	}
	return nil
}

// checkProtocol refuses an answer from a coordinator that speaks another
// version of the protocol (an answer without the header comes from one
// older than it, which speaks version 1).
func checkProtocol(v string) error {
	if v == "" || v == api.ProtocolVersion {
		return nil
	}
	return fmt.Errorf("lockclient: the coordinator speaks sharedcontent protocol %q, this client speaks %q; upgrade the older of the two: %w",
		v, api.ProtocolVersion, api.ErrUnsupportedProtocol)
}

func (tr *httpTransport) authorize(req *http.Request) {
	req.Header.Set(api.ProtocolHeader, api.ProtocolVersion)
	if tr.auth != "" {
		req.Header.Set("Authorization", tr.auth)
	}
	if c := tr.cluster.Load(); c != nil {
		req.Header.Set(api.ClusterHeader, *c)
	}
}

// responseError turns an error answer into an error that matches the
// sentinel of its code. A body that is not the coordinator's JSON (a proxy's
// error page) keeps its status and a short excerpt.
func responseError(status int, data []byte) *statusError {
	var er api.ErrorResponse
	if err := json.Unmarshal(data, &er); err != nil || er.Code == "" {
		msg := strings.TrimSpace(string(data))
		if len(msg) > 200 {
			msg = msg[:200] + "..."
		}
		er = api.ErrorResponse{Error: msg}
	}
	return &statusError{status: status, err: api.FromResponse(status, er)}
}

// maxRetryAfter bounds the pause a Retry-After header asks for.
const maxRetryAfter = time.Minute

// parseRetryAfter returns the pause of a Retry-After header given in
// seconds (the coordinator's form), 0 when there is none or it is not
// seconds.
func parseRetryAfter(v string) time.Duration {
	secs, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil || secs <= 0 {
		return 0
	}
	return min(time.Duration(secs)*time.Second, maxRetryAfter)
}
