package lockserver

// Older nodes' streams (docs/design.md §10.7). A node in the older shape
// (its sessions carry no instance ID) waits on a stream per waiting
// request (/lock/subscribe), not on the node's one stream, so it holds
// as many streams as it has pulls waiting. The HTTP side keeps those
// streams a share of their own, following how many members are in that
// shape (httpserver's stream limits), so that they and the current
// nodes' streams do not crowd each other out. The members part counts
// them: a member is older from a session without an instance ID until
// one with (an upgrade), and leaves the count when forgotten.

// StreamMembers counts the members, and those in the older shape, and
// reports whether node is one of them: what the event-stream limits
// follow.
func (c *Coordinator) StreamMembers(node string) (members, older int, nodeOlder bool) {
	c.mmu.Lock()
	defer c.mmu.Unlock()
	m := c.members[node]
	return len(c.members), c.olderMembers, m != nil && m.older
}

// noteShape records whether m's last session was in the older shape.
// Callers hold mmu.
func (mp *memberPart) noteShape(m *member, older bool) {
	switch {
	case older && !m.older:
		mp.olderMembers++
	case !older && m.older:
		mp.olderMembers--
	}
	m.older = older
}
