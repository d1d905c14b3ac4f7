package lockclient

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/sharedcontent/sharedcontent/lockserver/api"
)

// maxResponseBytes bounds a response body the client reads. Real answers
// are a few hundred bytes; a status with a long queue a few hundred KiB.
const maxResponseBytes = 16 << 20

// jsonMediaType is the value of the Content-Type and Accept headers. It is
// never modified.
var jsonMediaType = []string{"application/json"}

// httpBackend is the Backend of a remote lock server (SPEC §3's HTTP API).
// Its fields are set by newHTTPBackend and never change.
type httpBackend struct {
	base  string       // server URL without a trailing slash
	short *http.Client // short requests, with a timeout
	long  *http.Client // event streams, without a timeout
	token string       // bearer token; empty sends none

	pollInterval   time.Duration
	requestTimeout time.Duration // also bounds the wait for a stream's first event

	// onQueued, when set (by tests and benchmarks), is called when an
	// event stream has confirmed that the request waits in the queue.
	onQueued func(api.LockRequest)
}

func newHTTPBackend(serverURL string, o *options) (*httpBackend, error) {
	u, err := url.Parse(serverURL)
	if err != nil {
		return nil, fmt.Errorf("lockclient: server URL %q: %w: %w", serverURL, ErrInvalidArgument, err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("lockclient: server URL %q: want http(s)://host[:port][/path]: %w", serverURL, ErrInvalidArgument)
	}
	b := &httpBackend{
		base:           strings.TrimRight(u.String(), "/"),
		short:          o.short,
		long:           o.long,
		token:          o.token,
		pollInterval:   o.pollInterval,
		requestTimeout: o.requestTimeout,
	}
	if b.short == nil {
		b.short = &http.Client{Transport: newTransport(o.tlsConfig), Timeout: o.requestTimeout}
	}
	if b.long == nil {
		b.long = &http.Client{Transport: newTransport(o.tlsConfig)}
	}
	return b, nil
}

// newTransport returns a transport for the one coordinator. It ignores
// HTTP_PROXY and friends: nodes set them to reach registries, and the lock
// server is a cluster-internal service whose event streams proxies tend to
// buffer. (Use WithShortClient and WithLongClient to go through a proxy.)
func newTransport(tc *tls.Config) *http.Transport {
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
func (b *httpBackend) closeIdle() {
	b.short.CloseIdleConnections()
	b.long.CloseIdleConnections()
}

func (b *httpBackend) Lock(ctx context.Context, req api.LockRequest) (api.LockResponse, error) {
	var resp api.LockResponse
	err := b.do(ctx, http.MethodPost, "/lock", nil, req, &resp)
	return resp, err
}

func (b *httpBackend) Unlock(ctx context.Context, req api.UnlockRequest) (api.UnlockResponse, error) {
	var resp api.UnlockResponse
	err := b.do(ctx, http.MethodPost, "/unlock", nil, req, &resp)
	return resp, err
}

func (b *httpBackend) Keepalive(ctx context.Context, req api.KeepaliveRequest) (api.KeepaliveResponse, error) {
	var resp api.KeepaliveResponse
	err := b.do(ctx, http.MethodPost, "/lock/keepalive", nil, req, &resp)
	return resp, err
}

func (b *httpBackend) Cancel(ctx context.Context, req api.CancelRequest) error {
	return b.do(ctx, http.MethodPost, "/lock/cancel", nil, req, nil)
}

func (b *httpBackend) Status(ctx context.Context, typ OperationType, resourceID, requestID string) (api.StatusResponse, error) {
	q := url.Values{"type": {string(typ)}, "resource_id": {resourceID}}
	if requestID != "" {
		q.Set("request_id", requestID)
	}
	var resp api.StatusResponse
	err := b.do(ctx, http.MethodGet, "/lock/status", q, nil, &resp)
	return resp, err
}

func (b *httpBackend) AddRef(ctx context.Context, resourceID, nodeID string) (api.RefsResponse, error) {
	var resp api.RefsResponse
	err := b.do(ctx, http.MethodPost, "/refs/add", nil, api.RefsAddRequest{ResourceID: resourceID, NodeID: nodeID}, &resp)
	return resp, err
}

func (b *httpBackend) Refs(ctx context.Context, resourceID string) (api.RefsResponse, error) {
	var resp api.RefsResponse
	err := b.do(ctx, http.MethodGet, "/refs", url.Values{"resource_id": {resourceID}}, nil, &resp)
	return resp, err
}

// do sends one short request with a JSON body (when in is not nil) and
// decodes a 200 answer into out. An error answer becomes a *statusError
// around the error api.FromResponse makes of it, so errors.Is matches the
// protocol's sentinels.
func (b *httpBackend) do(ctx context.Context, method, path string, q url.Values, in, out any) error {
	var body io.Reader
	if in != nil {
		j, err := json.Marshal(in)
		if err != nil {
			return fmt.Errorf("lockclient: encoding %s request: %w", path, err)
		}
		body = bytes.NewReader(j)
	}
	target := b.base + path
	if q != nil {
		target += "?" + q.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, method, target, body)
	if err != nil {
		return fmt.Errorf("lockclient: %w", err)
	}
	// Shared header values: Header.Set would allocate them per request.
	if in != nil {
		req.Header["Content-Type"] = jsonMediaType
	}
	req.Header["Accept"] = jsonMediaType
	b.authorize(req)
	resp, err := b.short.Do(req)
	if err != nil {
		return err // a *url.Error naming the method and URL
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes))
	if err != nil {
		return fmt.Errorf("%s %s: reading the answer: %w", method, path, err)
	}
	if resp.StatusCode != http.StatusOK {
		return responseError(resp.StatusCode, data)
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(data, out); err != nil {
		// Not the lock server's answer (a misrouted proxy?): transient.
		return fmt.Errorf("%s %s: decoding the answer: %w", method, path, err)
	}
	return nil
}

func (b *httpBackend) authorize(req *http.Request) {
	if b.token != "" {
		req.Header.Set("Authorization", "Bearer "+b.token)
	}
}

// responseError turns an error answer into an error that matches the
// sentinel of its code. A body that is not the server's JSON (a proxy's
// error page) keeps its status and a short excerpt.
func responseError(status int, data []byte) error {
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
