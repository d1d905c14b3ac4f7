package lockserver

import (
	"context"
	"fmt"

	"github.com/containerd/log"

	"github.com/sharedcontent/sharedcontent/lockserver/api"
	"github.com/sharedcontent/sharedcontent/refcount"
)

// The cluster's shared root (docs/design.md §8.19). One node's view of the
// shared root is evidence about that node only: a brand-new node whose
// shared storage failed to mount sees an empty directory, and cannot tell
// it from the root of a brand-new cluster. The coordinator can: it records
// the cluster's root (its cluster file's creation time) the first time a
// node names one, with the identity, and
//   - refuses a session that asks to claim a root with no cluster file
//     (api.SessionRequest.Unclaimed) once the cluster has a root, before it
//     records anything of the node: a recorded root, or a member that has
//     synced or was adopted (a cluster older than the record);
//   - refuses a session naming another root of the cluster than the
//     recorded one: two first nodes that raced, each on a root of its own
//     (one of them not mounted), end with one root, the first named.
// Both refusals are api.ErrRootClaimed.

// checkRoot applies the root rules to a session request, before anything
// of the node is recorded. Callers hold mmu.
func (mp *memberPart) checkRoot(req api.SessionRequest, c api.Cluster) error {
	switch {
	case req.Unclaimed && req.Root != nil:
		// (A cluster ID may come with it: a client that expects the
		// cluster from an earlier claim of the same root.)
		return fmt.Errorf("session of node %s: unclaimed, yet naming a root: %w", req.NodeID, api.ErrInvalidArgument)
	case req.Root != nil && req.ClusterID == "":
		return fmt.Errorf("session of node %s: a root without its cluster_id: %w", req.NodeID, api.ErrInvalidArgument)
	case req.Root != nil && req.Root.CreatedAt.IsZero():
		return fmt.Errorf("session of node %s: a root without created_at: %w", req.NodeID, api.ErrInvalidArgument)
	case req.Unclaimed:
		if why := mp.hasRoot(); why != "" {
			return fmt.Errorf("node %s's shared root has no cluster file (.sharedcontent/cluster.json), but cluster %s already has a shared root (%s): "+
				"it is not the cluster's root: is the shared filesystem mounted at the node's root? Mount it there and start the node again; "+
				"a node never claims an empty directory for a cluster that has a root: %w",
				req.NodeID, c.ClusterID, why, api.ErrRootClaimed)
		}
	case req.Root != nil && mp.root != nil && !req.Root.CreatedAt.Equal(mp.root.CreatedAt):
		return fmt.Errorf("node %s serves a root of cluster %s %s, but the cluster's shared root is the one %s: "+
			"mount the cluster's shared storage at the node's root; if that node's root is the stray one (claimed while the shared storage "+
			"was not mounted), stop it and remove the root's .sharedcontent directory, which holds no blob of the cluster: %w",
			req.NodeID, c.ClusterID, req.Root, claimString(mp.root),
			api.ErrRootClaimed)
	}
	return nil
}

// hasRoot says why the cluster has a shared root, or "" when it has none
// yet (a brand-new cluster). Callers hold mmu.
func (mp *memberPart) hasRoot() string {
	if mp.root != nil {
		return "recorded: " + claimString(mp.root)
	}
	for _, m := range mp.members {
		switch {
		case m.rec.Generation != "":
			return "member " + m.rec.ID + " has synced on it"
		case m.rec.Adopted != "":
			return "member " + m.rec.ID + " was adopted from it"
		}
	}
	return ""
}

// recordRoot records req's root as the cluster's when none is. Callers
// hold mmu, after checkRoot.
func (mp *memberPart) recordRoot(ctx context.Context, req api.SessionRequest) error {
	if req.Root == nil || mp.root != nil {
		return nil
	}
	// The identity as it is now: an adoption (under mmu too) may have
	// changed it since the request was checked.
	c := mp.Cluster()
	if req.ClusterID != c.ClusterID {
		return wrongCluster(req.ClusterID, c)
	}
	root := &refcount.RootClaim{CreatedAt: req.Root.CreatedAt.UTC(), CreatedBy: req.Root.CreatedBy}
	if err := mp.commit(ctx, new(refcount.Batch).PutIdentity(refcount.Identity{ClusterID: c.ClusterID, Epoch: c.Epoch, Root: root})); err != nil {
		return fmt.Errorf("session of node %s: record the cluster's root: %w", req.NodeID, err)
	}
	mp.root = root
	log.G(ctx).WithField("node", req.NodeID).WithField("root", claimString(root)).
		Info("recorded the cluster's shared root")
	return nil
}

func claimString(r *refcount.RootClaim) string {
	return (&api.RootIdentity{CreatedAt: r.CreatedAt, CreatedBy: r.CreatedBy}).String()
}
