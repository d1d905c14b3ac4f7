package httpserver

import (
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/containerd/log"
)

// What a coordinator says at start about who may call it (auth.go): the
// identity mode in its start-up log, and a warning for each configuration
// that leaves it open to anyone or closed to every admin.

// exposedWarnEvery is how often a coordinator that serves beyond loopback
// without identity says so again, so that the warning is not lost at the
// top of a long log.
const exposedWarnEvery = time.Hour

// Identity names how callers are identified, as the start-up log says it
// (auth=...): "shared-token" (--auth-token-file), "node-tokens"
// (--node-tokens-file), "mtls" (client certificates, --tls-client-ca),
// joined by "+" when several apply, or "none". An admin token alone
// identifies only admins: "admin-token".
func (cfg Config) Identity() string {
	var modes []string
	if cfg.AuthTokenFile != "" {
		modes = append(modes, "shared-token")
	}
	if cfg.NodeTokensFile != "" {
		modes = append(modes, "node-tokens")
	}
	if cfg.TLSClientCA != "" {
		modes = append(modes, "mtls")
	}
	if len(modes) == 0 && cfg.AdminTokenFile != "" {
		modes = append(modes, "admin-token")
	}
	if len(modes) == 0 {
		return "none"
	}
	return strings.Join(modes, "+")
}

// anonymous reports whether a caller with no credentials is served: no
// shared token, no node tokens, no client certificates.
func (cfg Config) anonymous() bool {
	return cfg.AuthTokenFile == "" && cfg.NodeTokensFile == "" && cfg.TLSClientCA == ""
}

// noAdminWarning is the warning for node tokens without any admin
// identity, or "": the shared token is refused with node tokens, so no
// caller can make an admin call.
func (cfg Config) noAdminWarning() string {
	if cfg.NodeTokensFile == "" || cfg.AdminTokenFile != "" || cfg.TLSNodeIdentity {
		return ""
	}
	return "--node-tokens-file is set without --admin-token-file: no caller is an admin, so every admin call " +
		"(forgetting a node, adopting the cluster, expiring a member without the reap lock) is refused; " +
		"set --admin-token-file (docs/security.md)"
}

// exposedWarning is the warning for serving anonymous callers on addr, or
// "" when addr is reachable only from this host (loopback, a Unix socket)
// or callers must identify themselves.
func (cfg Config) exposedWarning(addr net.Addr) string {
	if !cfg.anonymous() || !beyondLoopback(addr) {
		return ""
	}
	if cfg.AdminTokenFile != "" {
		return fmt.Sprintf("the coordinator listens on %s with no client identity: anyone who can reach %s can act as any node "+
			"(take its locks, sync away its references); set --node-tokens-file or mTLS (docs/security.md)", addr, addr)
	}
	return fmt.Sprintf("the coordinator listens on %s with no identity: anyone who can reach %s can forget nodes or adopt the cluster; "+
		"set --node-tokens-file/--admin-token-file or mTLS (docs/security.md)", addr, addr)
}

// beyondLoopback reports whether other hosts may reach addr: a TCP
// address that is unspecified (0.0.0.0, ::) or not a loopback address.
func beyondLoopback(addr net.Addr) bool {
	a, ok := addr.(*net.TCPAddr)
	return ok && !a.IP.IsLoopback()
}

// warnExposed says exposedWarning for addr, if any, now and then every
// s.exposedWarnEvery until stop is closed.
func (s *Server) warnExposed(addr net.Addr, stop <-chan struct{}) {
	msg := s.cfg.exposedWarning(addr)
	if msg == "" {
		return
	}
	log.L.Warn(msg)
	go func() {
		t := time.NewTicker(s.exposedWarnEvery)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				log.L.Warn(msg)
			case <-stop:
				return
			}
		}
	}()
}
