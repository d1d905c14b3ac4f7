package etcdstore

import (
	"context"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// PollDBSizeOnce is one round of PollDBSize.
func (m *Metrics) PollDBSizeOnce(ctx context.Context, cli *clientv3.Client) {
	m.pollDBSize(ctx, cli, time.Minute)
}

// WrapRefsKV makes the reads of the reference keys' windows go through
// wrap's KV.
func (s *Store) WrapRefsKV(wrap func(clientv3.KV) clientv3.KV) { s.refsKV = wrap(s.refsKV) }

// StartWarmHooked is StartWarm with afterWalk called after each walk,
// before its hashes are kept and its watch starts.
func StartWarmHooked(ctx context.Context, cli *clientv3.Client, prefix string, wait time.Duration, afterWalk func(walk int)) *Warm {
	return startWarm(ctx, cli, prefix, wait, afterWalk)
}

// ReadToTheEnd makes List read to the end of refs/ each time, as it did
// before windows.
func (s *Store) ReadToTheEnd() { s.toTheEnd = true }

// ProgressSafe is progressSafe.
var ProgressSafe = progressSafe
