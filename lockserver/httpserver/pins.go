package httpserver

import (
	"crypto/subtle"
	"net/http"
	"strings"

	"github.com/valyala/fasthttp"

	"github.com/sharedcontent/sharedcontent/lockserver/api"
)

// The pins' endpoints (docs/design.md §8.21), every one admin:
//
//	GET    /pins         every pin (api.PinsResponse)
//	PUT    /pins/{name}  record the pin (body api.Pin), replacing one of that name
//	GET    /pins/{name}  one pin
//	DELETE /pins/{name}  drop the pin and its references
//
// A node identity is refused 403 before the handler runs (Handle).

// pinsRoute routes /pins and /pins/{name}, by method for the latter.
func (h *Handler) pinsRoute(ctx *fasthttp.RequestCtx) (route, bool) {
	path := string(ctx.Path())
	if path == "/pins" {
		return route{method: http.MethodGet, head: true, admin: true, handle: func(ctx *fasthttp.RequestCtx) {
			resp, err := h.coord().Pins(ctx)
			reply(ctx, resp, err)
		}}, true
	}
	name, ok := strings.CutPrefix(path, "/pins/")
	if !ok || name == "" || strings.Contains(name, "/") {
		return route{}, false
	}
	switch string(ctx.Method()) {
	case http.MethodPut:
		return route{method: http.MethodPut, admin: true, handle: func(ctx *fasthttp.RequestCtx) { h.putPin(ctx, name) }}, true
	case http.MethodDelete:
		return route{method: http.MethodDelete, admin: true, handle: func(ctx *fasthttp.RequestCtx) {
			reply(ctx, struct{}{}, h.coord().DeletePin(ctx, name))
		}}, true
	}
	return route{method: http.MethodGet, head: true, admin: true, others: []string{http.MethodPut, http.MethodDelete},
		handle: func(ctx *fasthttp.RequestCtx) {
			resp, err := h.coord().Pin(ctx, name)
			reply(ctx, resp, err)
		}}, true
}

func (h *Handler) putPin(ctx *fasthttp.RequestCtx, name string) {
	var p api.Pin
	if !decode(ctx, &p) {
		return
	}
	resp, err := h.coord().PutPin(ctx, name, p, h.adminName(ctx))
	reply(ctx, resp, err)
}

// adminName names the admin identity of a request, for a pin's By: the
// admin certificate's subject, the admin token, the shared token, or
// nobody (no authentication).
func (h *Handler) adminName(ctx *fasthttp.RequestCtx) string {
	if token, ok := bearerToken(ctx.Request.Header.Peek("Authorization")); ok {
		if len(h.admin) > 0 && subtle.ConstantTimeCompare(token, h.admin) == 1 {
			return "admin token"
		}
		return "shared token"
	}
	if st := ctx.TLSConnectionState(); st != nil && len(st.VerifiedChains) > 0 {
		if cn := st.VerifiedChains[0][0].Subject.CommonName; cn != "" {
			return "admin certificate " + cn
		}
		return "admin certificate"
	}
	return "anonymous"
}
