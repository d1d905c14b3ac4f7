package lockserver

import (
	"bytes"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"

	"github.com/containerd/log"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/sharedcontent/sharedcontent/lockserver/api"
)

// Handler serves a Locker's HTTP API (SPEC §3):
//
//	POST /lock            acquire, skip, queue or refuse
//	POST /unlock          release by the lease holder
//	POST /lock/keepalive  renew a lease
//	POST /lock/cancel     leave a queue or give back a grant
//	GET  /lock/subscribe  Server-Sent Events for a key or a request
//	GET  /lock/status     a key's holder, completion and queue
//	POST /refs/add        add a referrer
//	GET  /refs            a resource's referrers
//	GET  /healthz, /readyz, /metrics
//
// Every error is a JSON api.ErrorResponse with a 4xx or 5xx status.
type Handler struct {
	locker   *Locker
	token    []byte // bearer token; empty disables auth
	mux      *http.ServeMux
	draining atomic.Bool
	// streamsDone is closed by Drain to end every event stream.
	streamsDone chan struct{}
}

// HandlerOption configures a Handler.
type HandlerOption func(*Handler)

// WithBearerToken requires "Authorization: Bearer <token>" on every endpoint
// except /healthz and /readyz.
func WithBearerToken(token string) HandlerOption {
	return func(h *Handler) { h.token = []byte(token) }
}

// WithMetricsGatherer serves the gatherer's metrics on /metrics (the
// Registerer given to NewLocker, typically).
func WithMetricsGatherer(g prometheus.Gatherer) HandlerOption {
	return func(h *Handler) {
		h.mux.Handle("GET /metrics", promhttp.HandlerFor(g, promhttp.HandlerOpts{}))
	}
}

// NewHandler returns the HTTP API of l.
func NewHandler(l *Locker, opts ...HandlerOption) *Handler {
	h := &Handler{locker: l, mux: http.NewServeMux(), streamsDone: make(chan struct{})}
	h.mux.HandleFunc("POST /lock", h.lock)
	h.mux.HandleFunc("POST /unlock", h.unlock)
	h.mux.HandleFunc("POST /lock/keepalive", h.keepalive)
	h.mux.HandleFunc("POST /lock/cancel", h.cancel)
	h.mux.HandleFunc("GET /lock/subscribe", h.subscribe)
	h.mux.HandleFunc("GET /lock/status", h.status)
	h.mux.HandleFunc("POST /refs/add", h.refsAdd)
	h.mux.HandleFunc("GET /refs", h.refs)
	h.mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok\n") })
	h.mux.HandleFunc("GET /readyz", h.readyz)
	for _, o := range opts {
		o(h)
	}
	return h
}

// Drain makes /readyz and new requests answer 503 and ends every event
// stream, so that http.Server.Shutdown can finish.
func (h *Handler) Drain() {
	if h.draining.CompareAndSwap(false, true) {
		close(h.streamsDone)
	}
}

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if len(h.token) > 0 && r.URL.Path != "/healthz" && r.URL.Path != "/readyz" && !h.authorized(r) {
		w.Header().Set("WWW-Authenticate", `Bearer realm="sharedcontent"`)
		writeError(w, r, fmt.Errorf("missing or wrong bearer token: %w", api.ErrUnauthorized))
		return
	}
	if h.draining.Load() && r.URL.Path != "/healthz" && r.URL.Path != "/metrics" {
		writeError(w, r, fmt.Errorf("server is shutting down: %w", api.ErrUnavailable))
		return
	}
	h.mux.ServeHTTP(w, r)
}

func (h *Handler) authorized(r *http.Request) bool {
	got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	return ok && subtle.ConstantTimeCompare([]byte(got), h.token) == 1
}

func (h *Handler) readyz(w http.ResponseWriter, r *http.Request) {
	if h.draining.Load() {
		writeError(w, r, fmt.Errorf("server is shutting down: %w", api.ErrUnavailable))
		return
	}
	io.WriteString(w, "ok\n")
}

func (h *Handler) lock(w http.ResponseWriter, r *http.Request) {
	var req api.LockRequest
	if !decode(w, r, &req) {
		return
	}
	resp, err := h.locker.Lock(r.Context(), req)
	reply(w, r, resp, err)
}

func (h *Handler) unlock(w http.ResponseWriter, r *http.Request) {
	var req api.UnlockRequest
	if !decode(w, r, &req) {
		return
	}
	resp, err := h.locker.Unlock(r.Context(), req)
	reply(w, r, resp, err)
}

func (h *Handler) keepalive(w http.ResponseWriter, r *http.Request) {
	var req api.KeepaliveRequest
	if !decode(w, r, &req) {
		return
	}
	resp, err := h.locker.Keepalive(r.Context(), req)
	reply(w, r, resp, err)
}

func (h *Handler) cancel(w http.ResponseWriter, r *http.Request) {
	var req api.CancelRequest
	if !decode(w, r, &req) {
		return
	}
	err := h.locker.Cancel(r.Context(), req)
	reply(w, r, struct{}{}, err)
}

func (h *Handler) status(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	resp, err := h.locker.Status(r.Context(), api.OperationType(q.Get("type")), q.Get("resource_id"), q.Get("request_id"))
	reply(w, r, resp, err)
}

func (h *Handler) refsAdd(w http.ResponseWriter, r *http.Request) {
	var req api.RefsAddRequest
	if !decode(w, r, &req) {
		return
	}
	resp, err := h.locker.AddRef(r.Context(), req.ResourceID, req.NodeID)
	reply(w, r, resp, err)
}

func (h *Handler) refs(w http.ResponseWriter, r *http.Request) {
	resp, err := h.locker.Refs(r.Context(), r.URL.Query().Get("resource_id"))
	reply(w, r, resp, err)
}

// decode reads one JSON object of at most api.MaxBodyBytes with no unknown
// fields and nothing after it. On failure it has written the error.
func decode(w http.ResponseWriter, r *http.Request, v any) bool {
	if err := decodeRequest(http.MaxBytesReader(w, r.Body, api.MaxBodyBytes), v); err != nil {
		writeError(w, r, err)
		return false
	}
	return true
}

// DecodeRequest strictly decodes one JSON request body into v: exactly one
// object, no unknown fields, no trailing data. Errors match
// api.ErrInvalidArgument.
func DecodeRequest(body []byte, v any) error {
	return decodeRequest(bytes.NewReader(body), v)
}

// decodeRequest is DecodeRequest reading from body; a body cut off by
// http.MaxBytesReader is an error matching api.ErrTooLarge.
func decodeRequest(body io.Reader, v any) error {
	dec := json.NewDecoder(body)
	dec.DisallowUnknownFields()
	err := dec.Decode(v)
	if err == nil {
		// Only the end of the body may follow the object.
		if _, err = dec.Token(); err == io.EOF {
			return nil
		} else if err == nil {
			err = errTrailingData
		}
	}
	var tooLarge *http.MaxBytesError
	if errors.As(err, &tooLarge) {
		return fmt.Errorf("request body exceeds %d bytes: %w", api.MaxBodyBytes, api.ErrTooLarge)
	}
	return fmt.Errorf("malformed JSON request: %w: %w", api.ErrInvalidArgument, err)
}

var errTrailingData = errors.New("trailing data after the object")

func reply(w http.ResponseWriter, r *http.Request, v any, err error) {
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, v)
}

// jsonContentType is shared by every response: setting it through
// Header.Set would allocate a slice per response.
var jsonContentType = []string{"application/json"}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status, b = http.StatusInternalServerError, []byte(`{"error":"encoding response","code":"internal"}`)
	}
	w.Header()["Content-Type"] = jsonContentType
	w.WriteHeader(status)
	w.Write(append(b, '\n'))
}

func writeError(w http.ResponseWriter, r *http.Request, err error) {
	status, code := api.HTTPStatus(err)
	body := api.ErrorResponse{Error: err.Error(), Code: code}
	var inUse *api.InUseError
	if errors.As(err, &inUse) {
		body.Refs = &inUse.Refs
	}
	if status >= 500 {
		log.G(r.Context()).WithError(err).WithField("path", r.URL.Path).Error("request failed")
	}
	writeJSON(w, status, body)
}
