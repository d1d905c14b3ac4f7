package lockserver

import (
	"context"
	"fmt"

	"github.com/containerd/log"

	"github.com/sharedcontent/sharedcontent/internal/failpoint"
	"github.com/sharedcontent/sharedcontent/lockserver/api"
	"github.com/sharedcontent/sharedcontent/refcount"
)

// Coordinator identity (SPEC §8): a random cluster ID created with the
// database, and an epoch incremented at every start. Both go out with every
// answer, so a node notices a restart (it re-syncs) and a coordinator that
// lost its database (another cluster ID: the node treats it as
// unreachable until an operator adopts the root).

// Keys of the identity in the StateStore.
const (
	clusterIDKey = "cluster_id"
	epochKey     = "epoch"
)

// startEpoch reads (creating) the cluster ID and starts a new epoch.
func (l *Locker) startEpoch(ctx context.Context) error {
	id, err := l.state.GetString(ctx, clusterIDKey)
	if err != nil {
		return fmt.Errorf("lockserver: reading the cluster id: %w", err)
	}
	if id == "" {
		id = newID()
		if err := l.state.PutString(ctx, clusterIDKey, id); err != nil {
			return fmt.Errorf("lockserver: creating the cluster id: %w", err)
		}
	}
	epoch, err := l.state.GetUint64(ctx, epochKey)
	if err != nil {
		return fmt.Errorf("lockserver: reading the epoch: %w", err)
	}
	epoch++
	if err := l.state.PutUint64(ctx, epochKey, epoch); err != nil {
		return fmt.Errorf("lockserver: writing the epoch: %w", err)
	}
	l.cluster.Store(&api.Cluster{ClusterID: id, Epoch: epoch})
	return nil
}

// Cluster returns the coordinator's identity.
func (l *Locker) Cluster() api.Cluster { return *l.cluster.Load() }

// Adopt handles POST /cluster/adopt (admin): a coordinator whose database
// was lost takes the shared root's cluster ID, starts a new epoch and
// learns the root's members, none of them synced, so that it grants no
// delete until every one of them has sent its journal. A coordinator that
// already has members is refused unless req.Force.
func (l *Locker) Adopt(ctx context.Context, req api.AdoptRequest) (api.Cluster, error) {
	if err := validateID("cluster_id", req.ClusterID); err != nil {
		return api.Cluster{}, err
	}
	for _, n := range req.Nodes {
		if err := validateID("node_id", n); err != nil {
			return api.Cluster{}, err
		}
	}
	now := l.now()
	l.mmu.Lock()
	defer l.mmu.Unlock()
	cur := l.Cluster()
	if len(l.members) > 0 && !req.Force && cur.ClusterID != req.ClusterID {
		return api.Cluster{}, fmt.Errorf("cluster %s already has %d member(s); adopt with force to merge them: %w",
			cur.ClusterID, len(l.members), api.ErrMemberLive)
	}
	failpoint.Inject(failpoint.CoordAdoptBeforeMembers)
	for _, n := range req.Nodes {
		if l.members[n] != nil {
			continue
		}
		rec := refcount.Member{ID: n, FirstSeen: now, LastSeen: now}
		if err := l.wrote(ctx, l.state.PutMember(ctx, rec)); err != nil {
			return api.Cluster{}, fmt.Errorf("adopt: %w", err)
		}
		l.members[n] = &member{rec: rec}
	}
	// Everyone syncs again: under the adopted identity nothing is known.
	for _, m := range l.members {
		m.synced, m.sync = false, nil
	}
	failpoint.Inject(failpoint.CoordAdoptAfterMembers)
	if err := l.wrote(ctx, l.state.PutString(ctx, clusterIDKey, req.ClusterID)); err != nil {
		return api.Cluster{}, fmt.Errorf("adopt: %w", err)
	}
	failpoint.Inject(failpoint.CoordAdoptAfterCluster)
	c := api.Cluster{ClusterID: req.ClusterID, Epoch: cur.Epoch + 1}
	if err := l.wrote(ctx, l.state.PutUint64(ctx, epochKey, c.Epoch)); err != nil {
		return api.Cluster{}, fmt.Errorf("adopt: %w", err)
	}
	failpoint.Inject(failpoint.CoordAdoptAfterEpoch)
	l.cluster.Store(&c)
	l.metrics.members.Set(float64(len(l.members)))
	log.G(ctx).WithField("cluster_id", c.ClusterID).WithField("was", cur.ClusterID).WithField("members", len(l.members)).
		Warn("adopted the shared root's cluster; deletes wait until every member has synced")
	return c, nil
}

func wrongCluster(asked string, c api.Cluster) error {
	return fmt.Errorf("request is for cluster %s but this coordinator is cluster %s (epoch %d); "+
		"if its database was lost, adopt the shared root (sharedcontentctl cluster adopt): %w",
		asked, c.ClusterID, c.Epoch, api.ErrWrongCluster)
}
