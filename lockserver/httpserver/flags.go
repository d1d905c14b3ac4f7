package httpserver

import (
	"flag"
	"strings"
)

// RenamedFlags are the old names of RegisterFlags's flags, each with its
// new name: a binary that calls RegisterFlags keeps each old name as a
// deprecated alias (cmd/internal/cli.Alias), so old command lines,
// environment variables and TOML keys still work.
var RenamedFlags = []struct{ Old, New string }{
	{"allow-multi-node-download", "wait-by-default"},
}

// RegisterFlags binds cfg's fields to flags on fs, with cfg's current values
// as defaults. Both daemons (the stand-alone server and the plugin with its
// embedded coordinator) use it, so they spell every option the same way.
func RegisterFlags(fs *flag.FlagSet, cfg *Config) {
	fs.StringVar(&cfg.DataDir, "data-dir", cfg.DataDir, "directory of the coordinator's database (reference sets, fence high-water mark)")
	fs.IntVar(&cfg.Shards, "shards", cfg.Shards, "number of lock shards")
	fs.DurationVar(&cfg.LeaseTTL, "lease-ttl", cfg.LeaseTTL, "lease lifetime without keepalive; a crashed holder delays others at most this long; must be shorter than the nodes' fail-open delay, session-ttl/3 + session-ttl + session-ttl/10 + 2s (docs/design.md §8.8)")
	fs.DurationVar(&cfg.CompletedTTL, "completed-ttl", cfg.CompletedTTL, "how long a successful pull or delete is remembered so late requesters skip it")
	fs.BoolVar(&cfg.WaitByDefault, "wait-by-default", cfg.WaitByDefault, "queue a lock request that does not say whether it waits behind the holder (false: answer it 409 locked; a request that asks to wait is queued either way)")
	fs.BoolVar(&cfg.UpdateRequiresNoRef, "update-requires-no-ref", cfg.UpdateRequiresNoRef, "refuse updates while other nodes reference the resource")
	fs.DurationVar(&cfg.SessionTTL, "session-ttl", cfg.SessionTTL, "node session lifetime without keepalive; a node cut off from the coordinator uses blobs unregistered only after this long")
	fs.DurationVar(&cfg.NodeExpiry, "node-expiry", cfg.NodeExpiry, "forget a member node (and drop its references) only once the coordinator has not heard from it for this long of its own uptime (downtime does not count) and the reaper has seen its marker in the shared root unchanged this long; deletes wait for it until then")
	fs.DurationVar(&cfg.BystanderAfter, "bystander-after", cfg.BystanderAfter, "a member that never named its cluster, never authenticated as itself and never synced (a one-off session) no longer holds deletes up once the coordinator has not heard from it for this long of its own uptime; its references still count (0: always wait for it)")
	fs.DurationVar(&cfg.ReapGrace, "reap-grace", cfg.ReapGrace, "the reaper's grace: a reaper's delete is refused within this long of the blob's last pull or reference change, and while the coordinator has been up less than this long; a node's reaper also reclaims only what has been unreferenced or orphaned this long")
	fs.Func("reapers", "comma-separated node IDs that may run the reaper (take the reap lock, reap, expire members); an admin identity may too. Unset: with --node-tokens-file or --tls-node-identity no node reaps; without node identities any node may (every caller can act as any node there)", func(v string) error {
		cfg.Reapers = nil
		for _, n := range strings.Split(v, ",") {
			if n = strings.TrimSpace(n); n != "" {
				cfg.Reapers = append(cfg.Reapers, n)
			}
		}
		return nil
	})
	fs.DurationVar(&cfg.MaxReapHold, "reap-max-hold", cfg.MaxReapHold, "longest one hold of the reap lock: a holder that keeps it alive longer loses it and may not take it again for as long, so that it cannot stop reaping")
	fs.IntVar(&cfg.MaxWaitersPerNode, "max-waiters-per-node", cfg.MaxWaitersPerNode, "requests one node may have queued at once; more get 429")
	fs.IntVar(&cfg.MaxSyncs, "max-syncs", cfg.MaxSyncs, "sync requests served at once (default two per CPU, at least 4); more get 429 with Retry-After, session calls never")
	fs.IntVar(&cfg.MaxSyncBuffer, "max-sync-buffer", cfg.MaxSyncBuffer, "resource IDs that every unfinished sync together may buffer; a chunk past it gets 429 with Retry-After and is sent again")
	fs.DurationVar(&cfg.SyncTimeout, "sync-timeout", cfg.SyncTimeout, "an unfinished sync that sends nothing for this long is dropped with its buffer; the node starts it again")
	fs.StringVar(&cfg.AdminTokenFile, "admin-token-file", cfg.AdminTokenFile, "file holding the bearer token of admin calls (forget, release, adopt); empty: the auth token, if any")
	fs.StringVar(&cfg.AuthTokenFile, "auth-token-file", cfg.AuthTokenFile, "file holding the bearer token clients must send (empty: no auth)")
	fs.StringVar(&cfg.TLSCert, "tls-cert", cfg.TLSCert, "TLS certificate (PEM) to serve HTTPS")
	fs.StringVar(&cfg.TLSKey, "tls-key", cfg.TLSKey, "TLS private key (PEM)")
	fs.IntVar(&cfg.Limits.Total, "max-conns", cfg.Limits.Total, "connections served at once; more are answered 503 with Retry-After (0: three quarters of the descriptor limit)")
	fs.IntVar(&cfg.Limits.PerIP, "max-conns-per-ip", cfg.Limits.PerIP, "connections served at once from one IP address (0: 1024)")
	fs.DurationVar(&cfg.Limits.FirstHeader, "first-header-timeout", cfg.Limits.FirstHeader, "a connection that has not sent its first request header (and TLS handshake) this long after it was accepted is closed (0: 5s)")
	fs.DurationVar(&cfg.Limits.Idle, "idle-timeout", cfg.Limits.Idle, "longest idle wait of a keep-alive connection while fewer than half of --max-conns are taken; above that it shrinks with the free slots, down to 1s (0: 2m)")
	fs.StringVar(&cfg.NodeTokensFile, "node-tokens-file", cfg.NodeTokensFile, "file of \"NODE_ID TOKEN\" lines: each token authenticates its node, which may then act only as itself (mode as for --auth-token-file)")
	fs.BoolVar(&cfg.TLSNodeIdentity, "tls-node-identity", cfg.TLSNodeIdentity, "with --tls-client-ca: a client certificate names its node (URI SAN urn:sharedcontent:node:ID, else the common name; urn:sharedcontent:admin is the admin), which may then act only as itself")
	fs.StringVar(&cfg.TLSClientCA, "tls-client-ca", cfg.TLSClientCA, "CA (PEM) that client certificates must chain to (enables mTLS)")
}
