// Package refcount records which nodes use a shared resource (a blob, by
// digest), so that one node's garbage collection never deletes what another
// node still uses. It holds the model (ReferenceCount), its Storage
// (in-memory and bbolt implementations) and the Manager that applies the
// rules of the seeds' callback API.
package refcount
