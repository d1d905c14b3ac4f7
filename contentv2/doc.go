// Package contentv2 is a containerd content.Store for a content directory
// that several nodes share (docs/design.md §5). It wraps containerd's local
// store on the shared root, and coordinates every download and delete with
// the cluster's coordinator so that one node downloads each blob while the
// others reuse it, and no node's garbage collection deletes a blob another
// node still uses.
//
// The store speaks only its own Coordinator interface (§5.8), in the
// coordinator's vocabulary (lockserver/api's lock request and sentinel
// errors); contentv2/remote adapts a lockclient.Client (remote or
// embedded) to it.
//
// Writes. A write takes the blob's pull lock. The holder adds this node's
// reference before the blob becomes visible (§8.1). A node that finds the
// lock held gets a follower at once (§5.3): in ContainerdMode, Writer never
// blocks (containerd calls it inside a metadata transaction), and the
// follower waits in Status until the holder has committed (it then reuses
// the blob without downloading) or has failed (it then takes the lock over
// and downloads). LibraryMode waits in Writer instead.
//
// The journal and the session. Every reference goes into the node's
// journal on local disk (WithStateDir) before the coordinator is asked
// (§8.2). The store holds a session with the coordinator and, whenever the
// coordinator does not have this node's whole journal, syncs it (§8.3).
// A reference the coordinator refuses for want of a live session is no
// outage: the store opens the session again at once and retries
// (§8.4, nosession.go).
//
// When the coordinator cannot be reached. Writes wait: containerd is
// answered ErrUnavailable and retries, until this node's session has
// surely expired in the coordinator's eyes (FailOpenDelay after the last
// renewal sent); only then does a node that has joined the cluster use
// blobs uncoordinated, journaled, and sync them later (§8.8). A node that
// never joined, or whose credentials the coordinator refuses, never fails
// open. Deletes never happen without the coordinator (they fail closed);
// Delete then returns nil so that containerd's sweep goes on.
//
// Deletes and the reaper. Delete takes the delete lock without waiting and
// removes the file through the trash only under the delete rule: no other
// node's reference, every member synced (§8.7, §8.11). The reaper (§8.12),
// one node at a time under the reap lock, reclaims what containerd never
// offers for deletion: blobs nobody references, references to missing
// blobs, leftovers, and members gone by both measures. PlanReap is its
// decision, apart from its acts.
//
// A store refuses to open on a root that belongs to another cluster, or
// with a node ID another live instance holds (§8.10, §8.5).
package contentv2
