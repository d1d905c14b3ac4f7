package lockserver

import (
	"context"
	"fmt"
	"slices"

	"github.com/containerd/log"

	"github.com/sharedcontent/sharedcontent/internal/failpoint"
	"github.com/sharedcontent/sharedcontent/lockserver/api"
	"github.com/sharedcontent/sharedcontent/refcount"
)

// Coordinator identity (docs/design.md §8.10): a random cluster ID created with the
// database, and an epoch incremented at every start. Both go out with every
// answer, so a node notices a restart (it re-syncs) and a coordinator that
// lost its database (another cluster ID: the node treats it as
// unreachable until an operator adopts the root).

// startEpoch reads (creating) the cluster ID and starts a new epoch, in
// one transaction.
func (mp *memberPart) startEpoch(ctx context.Context) error {
	id, err := mp.state.Identity(ctx)
	if err != nil {
		return fmt.Errorf("lockserver: reading the cluster id and epoch: %w", err)
	}
	if id.ClusterID == "" {
		id.ClusterID = newID()
	}
	id.Epoch++
	if err := mp.refs.Commit(ctx, new(refcount.Batch).PutIdentity(id)); err != nil {
		return fmt.Errorf("lockserver: writing the cluster id and epoch: %w", err)
	}
	mp.cluster.Store(&api.Cluster{ClusterID: id.ClusterID, Epoch: id.Epoch})
	mp.mmu.Lock()
	mp.root = id.Root
	mp.mmu.Unlock()
	return nil
}

// Cluster returns the coordinator's identity.
func (mp *memberPart) Cluster() api.Cluster { return *mp.cluster.Load() }

// Adopt handles POST /cluster/adopt (admin): a coordinator whose database
// was lost takes the shared root's cluster ID, starts a new epoch and
// learns the root's members, none of them synced, so that it grants no
// delete until every one of them has sent its journal. A coordinator of
// another cluster that already has members is refused unless req.Force.
//
// The members, the cluster ID and the epoch are written in one batch
// (docs/design.md §8.10): the members first, one atomic group each, and
// the identity last, in a group of its own, so that a store that commits
// the batch as several transactions (etcd, docs/design.md §7.1) and
// stops between two leaves the old identity with some of the new members
// (unsynced: deletes wait for them too, the safe side), never the new
// identity without its members (nodes would accept this coordinator and
// deletes would not wait for the members it lacks). Adopting the same
// cluster again completes it (it is idempotent: nothing is refused, the
// epoch moves on), also after a failover in between: each member record
// an adoption writes names the adopted cluster (refcount.Member.Adopted),
// so the new leader, which loaded part of them, counts them as the
// re-run's own, not as members of another cluster.
func (mp *memberPart) Adopt(ctx context.Context, req api.AdoptRequest) (api.Cluster, error) {
	if err := validateID("cluster_id", req.ClusterID); err != nil {
		return api.Cluster{}, err
	}
	for _, n := range req.Nodes {
		if err := validateID("node_id", n); err != nil {
			return api.Cluster{}, err
		}
	}
	now := mp.now()
	mp.mmu.Lock()
	defer mp.mmu.Unlock()
	cur := mp.Cluster()
	own := 0 // members of this coordinator's cluster, not of an interrupted run of this adoption
	for _, m := range mp.members {
		if m.rec.Adopted != req.ClusterID {
			own++
		}
	}
	if own > 0 && !req.Force && cur.ClusterID != req.ClusterID {
		return api.Cluster{}, fmt.Errorf("this coordinator is cluster %s and already has %d member(s); "+
			"adopting cluster %s would merge them into it. If the shared root is the right one, run "+
			"`sharedcontentctl cluster adopt --root DIR --force`: %w",
			cur.ClusterID, own, req.ClusterID, api.ErrMemberLive)
	}
	b := new(refcount.Batch)
	var added []refcount.Member
	for _, n := range req.Nodes {
		if mp.members[n] != nil || slices.ContainsFunc(added, func(m refcount.Member) bool { return m.ID == n }) {
			continue
		}
		rec := refcount.Member{ID: n, FirstSeen: now, LastSeen: now, Adopted: req.ClusterID}
		b.PutMember(rec).Break()
		added = append(added, rec)
	}
	c := api.Cluster{ClusterID: req.ClusterID, Epoch: cur.Epoch + 1}
	b.Break().PutIdentity(refcount.Identity{ClusterID: c.ClusterID, Epoch: c.Epoch})
	failpoint.Inject(failpoint.CoordAdoptBeforeCommit)
	if err := mp.commit(ctx, b); err != nil {
		return api.Cluster{}, fmt.Errorf("adopt: not done (the identity is unchanged; some members may have been written); run the same command again: %w", err)
	}
	failpoint.Inject(failpoint.CoordAdoptAfterCommit)
	for _, rec := range added {
		mp.members[rec.ID] = &member{rec: rec}
	}
	// Everyone syncs again: under the adopted identity nothing is known.
	for _, m := range mp.members {
		m.synced = false
		mp.syncs.endSync(m)
	}
	mp.cluster.Store(&c)
	// The adopted cluster's root is recorded again by the first of its
	// nodes to name it (rootclaim.go); its members say meanwhile that
	// it has one.
	mp.root = nil
	mp.metrics.members.Set(float64(len(mp.members)))
	log.G(ctx).WithField("cluster_id", c.ClusterID).WithField("was", cur.ClusterID).WithField("members", len(mp.members)).
		Warn("adopted the shared root's cluster; deletes wait until every member has synced")
	return c, nil
}

func wrongCluster(asked string, c api.Cluster) error {
	return fmt.Errorf("request is for cluster %s but this coordinator is cluster %s (epoch %d); "+
		"if its database was lost, adopt the shared root (sharedcontentctl cluster adopt): %w",
		asked, c.ClusterID, c.Epoch, api.ErrWrongCluster)
}
