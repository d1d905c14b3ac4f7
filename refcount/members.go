package refcount

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/containerd/errdefs"
	bolt "go.etcd.io/bbolt"
)

// membersBucket maps a node ID to its JSON Member record.
var membersBucket = []byte("members")

// Member is a node of the cluster as the coordinator stores it
// (docs/design.md §8): a node is a member from its
// first session until it is forgotten.
type Member struct {
	ID        string    `json:"node_id"`
	FirstSeen time.Time `json:"first_seen"`
	// LastSeen is the last time the node held a session, written at most
	// every few minutes (the coordinator knows the exact time in memory).
	LastSeen time.Time `json:"last_seen"`
	// Generation is the journal generation the coordinator last received
	// a full sync from: a sync from another one only adds references.
	Generation string `json:"generation,omitempty"`
	// Bystander: the node joined without naming its cluster or
	// authenticating as itself and has completed no sync since
	// (docs/design.md §10.3). Absent from records an
	// older coordinator wrote: those members are not bystanders.
	Bystander bool `json:"bystander,omitempty"`
	// Lineage is the journal generation of the instances the node ID
	// belongs to (docs/design.md §8.5): a session from another one is
	// refused until an operator releases the ID (Lineage cleared).
	// Empty: not recorded yet (a new member, an older node or
	// coordinator, a released ID).
	Lineage string `json:"lineage,omitempty"`
	// Adopted is the cluster ID of the adoption that wrote the record
	// (docs/design.md §8.10): a re-run of an adoption interrupted between
	// two transactions (etcd) counts such members as its own, not as
	// another cluster's. Empty: not written by an adoption.
	Adopted string `json:"adopted,omitempty"`
}

// ListMembers implements Storage. A stored record that does not decode is
// an error wrapping errdefs.ErrDataLoss.
func (s *BoltStorage) ListMembers(ctx context.Context) ([]Member, error) {
	var out []Member
	err := s.view(ctx, func(tx *bolt.Tx) error {
		return tx.Bucket(membersBucket).ForEach(func(k, v []byte) error {
			var m Member
			if err := json.Unmarshal(v, &m); err != nil {
				return fmt.Errorf("member %s: decode: %w: %w", k, errdefs.ErrDataLoss, err)
			}
			m.ID = string(k)
			out = append(out, m)
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("list members: %w", err)
	}
	return out, nil
}
