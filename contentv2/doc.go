// Package contentv2 is a containerd content.Store for a content directory
// that several nodes share (SPEC §5). It wraps containerd's local store on
// the shared directory and coordinates through a Coordinator, its own
// interface (package contentv2/remote adapts the coordinator's client), so
// that one node downloads each blob while the others reuse it, and one
// node's garbage collection never deletes a blob another node still uses.
//
// Failure rules: when the coordinator cannot be reached, writes proceed
// uncoordinated (content is addressed by digest and ingests are
// node-scoped, so this is safe) and record their references once it is
// back; deletes never happen (fail-closed). Both are logged and counted.
package contentv2
