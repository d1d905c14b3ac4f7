package refcount

import (
	"slices"
	"sort"
)

// Set is a reference set: the nodes that reference one resource. A node
// that adds a reference twice is in it once. The zero value is an empty
// set ready to use.
type Set struct {
	Nodes map[string]struct{}
}

// NewSet returns the set of the given nodes.
func NewSet(nodes ...string) Set {
	var s Set
	for _, n := range nodes {
		s.Add(n)
	}
	return s
}

// Len returns the number of nodes in the set.
func (s Set) Len() int { return len(s.Nodes) }

// Has reports whether node references the resource.
func (s Set) Has(node string) bool {
	_, ok := s.Nodes[node]
	return ok
}

// Add adds node to the set and reports whether it was new.
func (s *Set) Add(node string) bool {
	if s.Has(node) {
		return false
	}
	if s.Nodes == nil {
		s.Nodes = make(map[string]struct{})
	}
	s.Nodes[node] = struct{}{}
	return true
}

// Remove removes node from the set and reports whether it was there.
func (s *Set) Remove(node string) bool {
	if !s.Has(node) {
		return false
	}
	delete(s.Nodes, node)
	return true
}

// NodeList returns the nodes in sorted order.
func (s Set) NodeList() []string {
	out := make([]string, 0, len(s.Nodes))
	for n := range s.Nodes {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// Others returns the sorted nodes other than node.
func (s Set) Others(node string) []string {
	return slices.DeleteFunc(s.NodeList(), func(n string) bool { return n == node })
}

// Clone returns a deep copy.
func (s Set) Clone() Set {
	var c Set
	if s.Nodes != nil {
		c.Nodes = make(map[string]struct{}, len(s.Nodes))
		for n := range s.Nodes {
			c.Nodes[n] = struct{}{}
		}
	}
	return c
}
