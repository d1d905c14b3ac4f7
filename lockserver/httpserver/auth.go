package httpserver

import (
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"crypto/tls"
	"fmt"
	"strings"

	"github.com/valyala/fasthttp"

	"github.com/sharedcontent/sharedcontent/lockserver/api"
)

// Who may call the coordinator, and as whom (docs/design.md §9). One of:
//
//   - a shared bearer token (WithBearerToken): whoever has it may act as
//     any node — one trust domain, as before node identities;
//
// or node identities, either or both of:
//
//   - node tokens (WithNodeTokens): each token names one node;
//   - client certificates (WithCertIdentity, with mTLS): the certificate's
//     URI SAN urn:sharedcontent:node:<id>, else its common name, names
//     the node; the URI SAN urn:sharedcontent:admin makes it an admin;
//
// and, with either, an admin token (WithAdminToken) for admin calls
// (forget, adopt).
//
// A shared token together with node identities would let whoever has it
// act as any node, defeating them: Open refuses the combination at
// start (--auth-token-file with --node-tokens-file or
// --tls-node-identity), and a Handler given both anyway accepts no
// shared token (401).
//
// With node tokens or certificate identity, every call but the probes
// must come from a node or an admin, and a node may act only as itself:
// a node_id it names (body, query or path) must be its own, and an
// omitted one on unlock, keepalive, cancel and status is filled with it.
// Admin calls then need an admin identity; without node identities, the
// admin token if set, else the shared token, as before.

// URI SANs of client certificates.
const (
	nodeURIPrefix = "urn:sharedcontent:node:"
	adminURI      = "urn:sharedcontent:admin"
)

// caller is who sent a request.
type caller struct {
	// node is the node it is authenticated as; empty: it may act as any
	// node (no node identities, or an admin).
	node  string
	admin bool
	// anonymous: it presented no credentials (no auth is configured
	// for what it asks).
	anonymous bool
}

// callerKey is the RequestCtx user value holding the caller.
const callerKey = "sharedcontent.caller"

// WithNodeTokens authenticates nodes by their bearer tokens: tokens maps
// each token to its node ID.
func WithNodeTokens(tokens map[string]string) HandlerOption {
	return func(h *Handler) {
		h.nodeTokens = make(map[[sha256.Size]byte]string, len(tokens))
		for token, node := range tokens {
			h.nodeTokens[sha256.Sum256([]byte(token))] = node
		}
	}
}

// WithCertIdentity authenticates nodes by their client certificates (the
// server must require them: mTLS).
func WithCertIdentity() HandlerOption {
	return func(h *Handler) { h.certIdentity = true }
}

// nodeIdentities reports whether nodes are authenticated one by one.
func (h *Handler) nodeIdentities() bool { return len(h.nodeTokens) > 0 || h.certIdentity }

// authenticate returns the request's caller, or false when it has none: a
// wrong token, or no identity where one is required.
func (h *Handler) authenticate(ctx *fasthttp.RequestCtx) (caller, bool) {
	if token, ok := bearerToken(ctx.Request.Header.Peek("Authorization")); ok {
		return h.tokenCaller(token)
	}
	if h.certIdentity {
		if c, ok := certCaller(ctx); ok {
			return c, true
		}
	}
	if h.nodeIdentities() || len(h.token) > 0 {
		return caller{}, false
	}
	// No authentication at all: anyone, as anyone.
	return caller{admin: len(h.admin) == 0, anonymous: true}, true
}

func (h *Handler) tokenCaller(token []byte) (caller, bool) {
	if len(h.admin) > 0 && subtle.ConstantTimeCompare(token, h.admin) == 1 {
		return caller{admin: true}, true
	}
	// A map lookup by the token's hash: its timing tells nothing about
	// the tokens.
	if node, ok := h.nodeTokens[sha256.Sum256(token)]; ok {
		return caller{node: node}, true
	}
	if len(h.token) > 0 && !h.nodeIdentities() && subtle.ConstantTimeCompare(token, h.token) == 1 {
		return caller{admin: len(h.admin) == 0}, true
	}
	return caller{}, false
}

// adminIdentity reports whether the request comes from an admin identity
// distinct from the nodes' (the admin token, an admin certificate): the
// one that may take the reaper's lock without being a designated reaper.
// Without one (no auth, or only the shared token) every caller is an
// admin, which designates nobody.
func (h *Handler) adminIdentity(ctx *fasthttp.RequestCtx) bool {
	who, ok := h.authenticate(ctx)
	return ok && who.admin && !who.anonymous && (len(h.admin) > 0 || h.certIdentity)
}

// certCaller names the caller by its verified client certificate.
func certCaller(ctx *fasthttp.RequestCtx) (caller, bool) {
	st := ctx.TLSConnectionState()
	if st == nil || len(st.VerifiedChains) == 0 {
		return caller{}, false
	}
	return certIdentity(st)
}

func certIdentity(st *tls.ConnectionState) (caller, bool) {
	cert := st.VerifiedChains[0][0]
	for _, u := range cert.URIs {
		switch s := u.String(); {
		case s == adminURI:
			return caller{admin: true}, true
		case strings.HasPrefix(s, nodeURIPrefix) && len(s) > len(nodeURIPrefix):
			return caller{node: strings.TrimPrefix(s, nodeURIPrefix)}, true
		}
	}
	if cn := cert.Subject.CommonName; cn != "" {
		return caller{node: cn}, true
	}
	return caller{}, false
}

// bearerToken returns the credentials of an "Authorization: Bearer <token>"
// header; the scheme is case-insensitive (RFC 7235 section 2.1).
func bearerToken(h []byte) ([]byte, bool) {
	scheme, token, ok := bytes.Cut(h, []byte(" "))
	if !ok || !bytes.EqualFold(scheme, []byte("Bearer")) {
		return nil, false
	}
	token = bytes.TrimLeft(token, " ")
	return token, len(token) > 0
}

// callerOf returns the caller Handle authenticated as a node, or the zero
// caller (who may act as any node): Handle stores only node callers.
func callerOf(ctx *fasthttp.RequestCtx) caller {
	c, _ := ctx.UserValue(callerKey).(caller)
	return c
}

// actAs checks that the caller may act as *node, filling it in with the
// caller's node when empty. On refusal it has written the 403.
func actAs(ctx *fasthttp.RequestCtx, node *string) bool {
	c := callerOf(ctx)
	switch {
	case c.node == "":
		return true
	case *node == "":
		*node = c.node
		return true
	case *node == c.node:
		return true
	}
	writeError(ctx, fmt.Errorf("authenticated as node %q, the request acts as node %q: %w", c.node, *node, api.ErrForbidden))
	return false
}
