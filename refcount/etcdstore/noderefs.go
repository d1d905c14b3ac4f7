package etcdstore

import (
	"context"
	"fmt"
	"slices"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// NodeRefs implements refcount.Storage: the resources node
// references in resource ID order, read from its index keys in one range
// (keys only; they come in bucket order).
func (s *Store) NodeRefs(ctx context.Context, node string) ([]string, error) {
	if err := s.usable(ctx); err != nil {
		return nil, err
	}
	prefix := s.k.node(node)
	resp, err := s.cli.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		return nil, fmt.Errorf("etcdstore: references of node %s: %w", node, err)
	}
	out := make([]string, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		out = append(out, indexResource(string(kv.Key[len(prefix):])))
	}
	slices.Sort(out)
	return out, nil
}
