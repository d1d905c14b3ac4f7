package lockserver

import (
	"fmt"
	"time"

	"github.com/sharedcontent/sharedcontent/lockserver/api"
)

const (
	// DefaultShards spreads resources so unrelated digests rarely contend.
	DefaultShards = 32
	// DefaultLeaseTTL bounds how long a crashed holder delays the others;
	// clients renew every TTL/3.
	DefaultLeaseTTL = 15 * time.Second
	// DefaultCompletedTTL is how long a successful pull or delete is
	// remembered so that late requesters skip the work.
	DefaultCompletedTTL = 5 * time.Minute
	// DefaultClaimTimeout is how long a grant handed to a waiter may stay
	// unclaimed. It is longer than the clients' 500 ms polling interval.
	DefaultClaimTimeout = 3 * time.Second
	// DefaultSessionTTL is how long a node's session lasts without a
	// keepalive (nodes renew every TTL/3). A node cut off from the
	// coordinator uses blobs unregistered only after about this long.
	DefaultSessionTTL = 15 * time.Second
	// DefaultNodeExpiry is how long a member must be both unheard of (in
	// the coordinator's uptime) and its marker in the shared root
	// unchanged before the reaper may forget it (its references dropped;
	// docs/design.md §8). Until then, deletes wait for it. A week outlasts a long
	// weekend's outage and a node's repair.
	DefaultNodeExpiry = 7 * 24 * time.Hour
	// DefaultBystanderAfter is how long a bystander must be absent before
	// deletes stop waiting for it (docs/design.md §10.3).
	DefaultBystanderAfter = 10 * time.Minute
	// DefaultReapGrace is how long after a resource's last pull or
	// reference change the coordinator refuses a reaper's delete of it,
	// and how long it refuses every reaper's delete after it starts
	// (docs/design.md §8.12). It matches the nodes'
	// own reaper grace.
	DefaultReapGrace = time.Hour
	// DefaultMaxReapHold bounds how long one node holds the reap lock
	// (docs/design.md §8.12): a holder that keeps it alive longer loses it,
	// and may not take it again for as long, so that it cannot stop
	// reaping. A pass takes minutes on a large root.
	DefaultMaxReapHold = time.Hour
	// DefaultFenceBlock is how many fences are reserved per persisted
	// high-water mark write.
	DefaultFenceBlock = 4096
)

// Config configures a Coordinator. The zero value is not valid; start from
// DefaultConfig.
type Config struct {
	// Shards is the number of lock shards (FNV-1a of resource_id).
	Shards int
	// LeaseTTL is the lifetime of a grant without keepalive.
	LeaseTTL time.Duration
	// CompletedTTL is how long successful pulls and deletes are retained.
	CompletedTTL time.Duration
	// ClaimTimeout releases grants nobody picked up.
	ClaimTimeout time.Duration
	// WaitByDefault queues a lock request that does not say whether it
	// waits (api.LockRequest.Wait nil) behind the holder. When false such
	// a request gets ErrLocked instead; one that asks to wait is queued
	// either way. Flag --wait-by-default (old name, deprecated:
	// --allow-multi-node-download).
	WaitByDefault bool
	// UpdateRequiresNoRef refuses updates while other nodes reference the
	// resource.
	UpdateRequiresNoRef bool
	// SessionTTL is the lifetime of a node's session without keepalive.
	SessionTTL time.Duration
	// NodeExpiry: a member is forgotten (by the reaper, through Expire)
	// only once the coordinator has not heard from it for this long of its
	// own uptime and its marker has not changed for this long.
	NodeExpiry time.Duration
	// BystanderAfter: a bystander (bystander.go: a member that never
	// named its cluster, never authenticated as itself and never synced)
	// absent this long of the coordinator's uptime no longer holds
	// deletes up. 0 never lets one go.
	BystanderAfter time.Duration
	// ReapGrace: a delete with a reap mode is refused within this long
	// of the resource's last pull or reference change, and while the
	// coordinator has been up less than this long (it cannot know what
	// happened before it started). 0 checks no time (tests).
	ReapGrace time.Duration
	// Reapers are the nodes that may take the reap lock, and so reap and
	// expire members (docs/design.md §8.12). Empty: any node, unless
	// ReapersRequired. An admin caller (AsAdmin) may always.
	Reapers []string
	// ReapersRequired makes an empty Reapers designate nobody: the
	// server sets it when nodes have identities of their own.
	ReapersRequired bool
	// MaxReapHold bounds one hold of the reap lock; 0 is
	// DefaultMaxReapHold.
	MaxReapHold time.Duration
	// MaxWaitersPerNode bounds the requests one node may have queued at
	// once; more are refused with 429 (docs/design.md §9).
	MaxWaitersPerNode int
	// MaxSyncs bounds the sync requests served at once; more are
	// answered 429 with Retry-After (syncbounds.go). Session calls are
	// never counted.
	MaxSyncs int
	// MaxSyncBuffer bounds the resource IDs that every unfinished sync
	// together buffers; a chunk past it is answered 429.
	MaxSyncBuffer int
	// SyncTimeout: an unfinished sync that sends nothing for this long is
	// dropped with its buffer.
	SyncTimeout time.Duration
	// FirstSyncWindow is how long a first sync's write waits for others
	// to share its transaction, and FirstSyncRefs bounds the references
	// of one shared transaction (syncshare.go, docs/design.md §10.9).
	FirstSyncWindow time.Duration
	FirstSyncRefs   int
}

// DefaultConfig returns the documented defaults.
func DefaultConfig() Config {
	return Config{
		Shards:            DefaultShards,
		LeaseTTL:          DefaultLeaseTTL,
		CompletedTTL:      DefaultCompletedTTL,
		ClaimTimeout:      DefaultClaimTimeout,
		WaitByDefault:     true,
		SessionTTL:        DefaultSessionTTL,
		NodeExpiry:        DefaultNodeExpiry,
		BystanderAfter:    DefaultBystanderAfter,
		ReapGrace:         DefaultReapGrace,
		MaxReapHold:       DefaultMaxReapHold,
		MaxWaitersPerNode: DefaultMaxWaitersPerNode,
		MaxSyncs:          DefaultMaxSyncs(),
		MaxSyncBuffer:     DefaultSyncBuffer,
		SyncTimeout:       DefaultSyncTimeout,
		FirstSyncWindow:   DefaultFirstSyncWindow,
		FirstSyncRefs:     DefaultFirstSyncRefs,
	}
}

// withSyncDefaults fills the sync bounds a configuration left zero (one
// written before they existed) with their defaults.
func (c Config) withSyncDefaults() Config {
	if c.MaxSyncs == 0 {
		c.MaxSyncs = DefaultMaxSyncs()
	}
	if c.MaxSyncBuffer == 0 {
		c.MaxSyncBuffer = DefaultSyncBuffer
	}
	if c.SyncTimeout == 0 {
		c.SyncTimeout = DefaultSyncTimeout
	}
	if c.FirstSyncWindow == 0 {
		c.FirstSyncWindow = DefaultFirstSyncWindow
	}
	if c.FirstSyncRefs == 0 {
		c.FirstSyncRefs = DefaultFirstSyncRefs
	}
	return c
}

// Validate reports the first invalid field.
func (c Config) Validate() error {
	switch {
	case c.Shards < 1 || c.Shards > 1<<16:
		return fmt.Errorf("shards must be in [1, 65536], got %d", c.Shards)
	case c.LeaseTTL < 10*time.Millisecond:
		return fmt.Errorf("lease_ttl must be at least 10ms, got %s", c.LeaseTTL)
	case c.CompletedTTL < 0:
		return fmt.Errorf("completed_ttl must not be negative, got %s", c.CompletedTTL)
	case c.ClaimTimeout < 10*time.Millisecond:
		return fmt.Errorf("claim_timeout must be at least 10ms, got %s", c.ClaimTimeout)
	case c.SessionTTL < 10*time.Millisecond:
		return fmt.Errorf("session_ttl must be at least 10ms, got %s", c.SessionTTL)
	case c.MaxWaitersPerNode < 1:
		return fmt.Errorf("max_waiters_per_node must be at least 1, got %d", c.MaxWaitersPerNode)
	case c.BystanderAfter < 0:
		return fmt.Errorf("bystander_after must not be negative, got %s", c.BystanderAfter)
	case c.MaxSyncs < 1:
		return fmt.Errorf("max_syncs must be at least 1, got %d", c.MaxSyncs)
	case c.MaxSyncBuffer < api.MaxSyncChunk:
		return fmt.Errorf("max_sync_buffer must be at least one chunk (%d), got %d", api.MaxSyncChunk, c.MaxSyncBuffer)
	case c.SyncTimeout < 10*time.Millisecond:
		return fmt.Errorf("sync_timeout must be at least 10ms, got %s", c.SyncTimeout)
	case c.FirstSyncWindow < 0:
		return fmt.Errorf("first_sync_window must not be negative, got %s", c.FirstSyncWindow)
	case c.FirstSyncRefs < 0:
		return fmt.Errorf("first_sync_refs must not be negative, got %d", c.FirstSyncRefs)
	case c.ReapGrace < 0:
		return fmt.Errorf("reap_grace must not be negative, got %s", c.ReapGrace)
	case c.MaxReapHold < 0:
		return fmt.Errorf("max_reap_hold must not be negative, got %s", c.MaxReapHold)
	case c.NodeExpiry < c.SessionTTL:
		return fmt.Errorf("node_expiry (%s) must be at least session_ttl (%s)", c.NodeExpiry, c.SessionTTL)
	}
	for _, n := range c.Reapers {
		if err := validateID("reapers", n); err != nil {
			return err
		}
	}
	return nil
}

// maxReapHold is MaxReapHold, or its default when unset (a configuration
// written before it existed).
func (c Config) maxReapHold() time.Duration {
	if c.MaxReapHold == 0 {
		return DefaultMaxReapHold
	}
	return c.MaxReapHold
}

// FailOpenDelay is how long after the last session renewal it sent a
// member cut off from a coordinator with session TTL ttl waits before it
// uses blobs unregistered (docs/design.md §8.8). It is the nodes'
// contentv2.FailOpenDelay (TestFailOpenDelaysAgree).
func FailOpenDelay(ttl time.Duration) time.Duration {
	return ttl/3 + ttl + ttl/10 + 2*time.Second
}

// CheckLeaseTTL refuses a lease TTL at which a delete lease can outlive a
// member's fail-open (docs/design.md §8.8): lease_ttl < FailOpenDelay(
// session_ttl). A deleter frozen (a paused VM) since before a member was
// cut off then loses its lease, which its unlock needs, before that member
// may use a blob unregistered. Both daemons check it at start; the
// Coordinator's own unlock check (checkDeleteUnlock) covers the other
// order too, so a library user's test configuration may break it.
func (c Config) CheckLeaseTTL() error {
	if fo := FailOpenDelay(c.SessionTTL); c.LeaseTTL >= fo {
		return fmt.Errorf("--lease-ttl %s is not shorter than the nodes' fail-open delay at --session-ttl %s (%s = session-ttl/3 + session-ttl + session-ttl/10 + 2s): a delete lease could outlive a cut-off member's fail-open, and a frozen deleter delete a blob that member uses; lower --lease-ttl below %s or raise --session-ttl (docs/design.md §8.8)",
			c.LeaseTTL, c.SessionTTL, fo, fo)
	}
	return nil
}

// sweepInterval is how often each shard looks for expired leases, unclaimed
// grants, abandoned waiters and old completions.
func (c Config) sweepInterval() time.Duration {
	d := min(c.LeaseTTL, c.ClaimTimeout) / 4
	return max(5*time.Millisecond, min(d, time.Second))
}
