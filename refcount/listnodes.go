package refcount

import "context"

// NodesEntry is one reference set as a list: its nodes in order.
type NodesEntry struct {
	ResourceID string
	Nodes      []string
}

// NodeLister is a Storage that lists reference sets with their nodes
// already in order, without building a Set per entry: what a page of GET
// /refs/list needs (docs/design.md §10.3). ListNodes answers what List
// does, each Set as its NodeList.
type NodeLister interface {
	ListNodes(ctx context.Context, after string, limit int) ([]NodesEntry, error)
}

var (
	_ NodeLister = (*BoltStorage)(nil)
	_ NodeLister = (*Manager)(nil)
)

// ListNodes returns a page as List does, each set as its sorted nodes; on
// a storage that is not a NodeLister it is List and NodeList.
func (m *Manager) ListNodes(ctx context.Context, after string, limit int) ([]NodesEntry, error) {
	if nl, ok := m.storage.(NodeLister); ok {
		return nl.ListNodes(ctx, after, limit)
	}
	page, err := m.storage.List(ctx, after, limit)
	if err != nil {
		return nil, err
	}
	out := make([]NodesEntry, len(page))
	for i, e := range page {
		out[i] = NodesEntry{ResourceID: e.ResourceID, Nodes: e.Refs.NodeList()}
	}
	return out, nil
}
