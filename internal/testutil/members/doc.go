// Package members opens coordinator sessions for test nodes: the
// coordinator records references only for a node with a live session
// (docs/design.md §8.4), so a test that adds references as a node opens
// the node's session first, as the node's daemon does.
package members
