package refcount

import (
	"slices"
	"sort"
)

// ReferenceCount is the set of nodes that reference one resource. Count is
// always len(Nodes): a node that pulls twice counts once. The zero value is
// an empty set ready to use.
type ReferenceCount struct {
	Count int                 `json:"count"`
	Nodes map[string]struct{} `json:"-"`
}

// Has reports whether node references the resource.
func (r *ReferenceCount) Has(node string) bool {
	_, ok := r.Nodes[node]
	return ok
}

// Add adds node to the set and reports whether it was new.
func (r *ReferenceCount) Add(node string) bool {
	if r.Has(node) {
		return false
	}
	if r.Nodes == nil {
		r.Nodes = make(map[string]struct{})
	}
	r.Nodes[node] = struct{}{}
	r.Count = len(r.Nodes)
	return true
}

// Remove removes node from the set and reports whether it was there.
func (r *ReferenceCount) Remove(node string) bool {
	if !r.Has(node) {
		return false
	}
	delete(r.Nodes, node)
	r.Count = len(r.Nodes)
	return true
}

// NodeList returns the nodes in sorted order.
func (r ReferenceCount) NodeList() []string {
	out := make([]string, 0, len(r.Nodes))
	for n := range r.Nodes {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// Others returns the sorted nodes other than node.
func (r ReferenceCount) Others(node string) []string {
	return slices.DeleteFunc(r.NodeList(), func(n string) bool { return n == node })
}

// Clone returns a deep copy.
func (r ReferenceCount) Clone() ReferenceCount {
	c := ReferenceCount{Count: r.Count}
	if r.Nodes != nil {
		c.Nodes = make(map[string]struct{}, len(r.Nodes))
		for n := range r.Nodes {
			c.Nodes[n] = struct{}{}
		}
	}
	return c
}

// New returns the set of the given nodes.
func New(nodes ...string) ReferenceCount {
	var r ReferenceCount
	for _, n := range nodes {
		r.Add(n)
	}
	return r
}
