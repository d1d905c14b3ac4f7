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
